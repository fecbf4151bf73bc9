# Sourced by the device-side call scripts (tools/gpu_*_call.sh). The tests make their fixtures with
# /usr/bin/python3 and numpy (Debian's python3-numpy on CI); the GPU machine's /usr/bin/python3 has no
# numpy, its PATH python3 (torch's environment) has. For the call, /usr/bin/python3 becomes a wrapper
# of that one (the device machine is discarded after the session).
if ! /usr/bin/python3 -c "import numpy" 2>/dev/null; then
  tessera_py=$(command -v python3 || true)
  if [ -n "$tessera_py" ] && [ "$tessera_py" != /usr/bin/python3 ] && "$tessera_py" -c "import numpy" 2>/dev/null; then
    printf '#!/bin/sh\nexec %s "$@"\n' "$tessera_py" >/tmp/tessera-python3 && chmod +x /tmp/tessera-python3 &&
      mv -f /tmp/tessera-python3 /usr/bin/python3 && echo "device_python: /usr/bin/python3 -> $tessera_py"
  else
    echo "device_python: no python3 with numpy found; the fixture-making tests will fail"
  fi
fi
