#!/usr/bin/env bash
echo "TODO smoke"; exit 1
