# Sourced by the CLI tests. numpy_python prints a python3 that has numpy: $AMK_PYTHON, Debian's
# (scripts/setup.sh installs numpy there) or PATH's (the GPU machine's Debian python has none);
# it fails when none has.
numpy_python() {
  local c
  for c in "${AMK_PYTHON:-}" /usr/bin/python3 python3; do
    if [ -n "$c" ] && "$c" -c "import numpy" 2>/dev/null; then
      echo "$c"
      return 0
    fi
  done
  return 1
}
