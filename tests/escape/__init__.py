"""The escape suite's parts (tests/test_escape.py): the world a hostile model is let loose in
(`world.py`), the hostile commands with the probe that says whether each got out (`cases.py`),
and the run that drives them through the real server and the scripted model (`harness.py`)."""
