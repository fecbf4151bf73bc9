# Sourced by the device-side call scripts (tools/gpu_*_call.sh). The tests make their fixtures with a
# python3 that has numpy (testing::Python3(): Debian's /usr/bin/python3 with python3-numpy on CI). The
# GPU machine's /usr/bin/python3 has no numpy; its PATH python3 (torch's environment) has, and the
# tests take it through TESSERA_TEST_PYTHON.
if ! /usr/bin/python3 -c "import numpy" 2>/dev/null; then
  tessera_py=$(command -v python3 || true)
  if [ -n "$tessera_py" ] && "$tessera_py" -c "import numpy" 2>/dev/null; then
    export TESSERA_TEST_PYTHON=$tessera_py
    echo "device_python: the tests use $tessera_py"
  else
    echo "device_python: no python3 with numpy found; the fixture-making tests will fail"
  fi
fi
