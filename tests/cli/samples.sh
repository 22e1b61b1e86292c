#!/usr/bin/env bash
echo "TODO samples"; exit 1
