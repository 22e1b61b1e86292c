#!/usr/bin/env bash
echo "TODO bad_inputs"; exit 1
