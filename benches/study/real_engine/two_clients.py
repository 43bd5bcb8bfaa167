"""An experiment (run 11, ``2026-11-27c_device_two_clients.txt``): at each p, the truth's closed loop
(``gymbench.calibrate.loadgen.closed_loop``) and ``calibrate-sim``'s (``measure_closed_loop``, since removed)
back to back, alternating, on one llama-server ``-np 64 -t 1``: did the two clients read the same engine
alike? (They did: mean ratio 0.996.)

Since issue 38 the two are one loop (:func:`gymbench.calibrate.loadgen.closed_loop`, through the ``openai``
backend), so there is nothing left to compare; the script as it was run is
``git show bec7557:benches/study/real_engine/two_clients.py``.
"""

import sys

if __name__ == "__main__":
    sys.exit("two_clients.py: the truth's and calibrate-sim's loops are one since issue 38; see the docstring")
