"""How long the Python tests wait: the scale of tests/test_timing.h (see cmake/test_timing.cmake).

Every timeout, deadline and wait in the Python tests is written for Release speed on an idle machine and passed
through scaled(): multiplied by the build's slowdown (QVL_TEST_BUILD_SLOWDOWN, which CTest sets: 4 under
ASan+UBSan) and by QVL_TEST_TIME_SCALE (a float > 0, default 1; 2 or 3 on a slow or loaded machine).
"""
import os


def _factor(name: str) -> float:
    try:
        value = float(os.environ.get(name, "1"))
    except ValueError:
        return 1.0
    return value if value > 0 else 1.0


SCALE = _factor("QVL_TEST_BUILD_SLOWDOWN") * _factor("QVL_TEST_TIME_SCALE")


def scaled(seconds: float) -> float:
    """`seconds` at Release speed, as this build and machine need them."""
    return seconds * SCALE
