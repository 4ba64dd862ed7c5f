# How long tests wait: every timeout, deadline and wait in tests/ is a figure for Release speed on an idle
# machine, multiplied by one scale (tests/test_timing.h in C++, tests/timing.py in Python), the product of
#   QVL_TEST_BUILD_SLOWDOWN  the build's own slowdown, set here: 1 in Release, 4 under ASan+UBSan, 8 under TSan,
#                            10 under qemu-user (the arm64 cross build); compiled into qvl_tests and handed to
#                            the script tests through their ENVIRONMENT
#   QVL_TEST_TIME_SCALE      the machine's, from the environment when the tests run: a float > 0, default 1
#                            (QVL_TEST_TIME_SCALE=3 scripts/test on a slow or loaded machine)
# CTest's own per-test TIMEOUTs are fixed here, when configuring (scripts/setup and the presets configure on
# every run): qvl_test_timeout() multiplies them by the slowdown and by QVL_TEST_TIME_SCALE as it is now.
if(QVL_SANITIZE STREQUAL "address")
  set(QVL_TEST_BUILD_SLOWDOWN 4)  # ASan+UBSan: about 3x the Release time, and room for a busy machine
elseif(QVL_SANITIZE STREQUAL "thread")
  set(QVL_TEST_BUILD_SLOWDOWN 8)  # TSan: 5-15x, the most in the many-threaded server tests
elseif(CMAKE_CROSSCOMPILING_EMULATOR)
  set(QVL_TEST_BUILD_SLOWDOWN 10)  # qemu-user translating AArch64 on x86
else()
  set(QVL_TEST_BUILD_SLOWDOWN 1)
endif()

set(QVL_TEST_TIME_SCALE_NOW 1)
if(NOT "$ENV{QVL_TEST_TIME_SCALE}" STREQUAL "")
  if(NOT "$ENV{QVL_TEST_TIME_SCALE}" MATCHES "^([0-9]+\\.?[0-9]*|\\.[0-9]+)$" OR "$ENV{QVL_TEST_TIME_SCALE}" MATCHES "^[0.]+$")
    message(FATAL_ERROR "QVL_TEST_TIME_SCALE='$ENV{QVL_TEST_TIME_SCALE}': expected a number > 0, such as 2 or 1.5")
  endif()
  set(QVL_TEST_TIME_SCALE_NOW $ENV{QVL_TEST_TIME_SCALE})
endif()
message(STATUS "qvl: tests wait ${QVL_TEST_BUILD_SLOWDOWN} (build) x ${QVL_TEST_TIME_SCALE_NOW} (QVL_TEST_TIME_SCALE) times the Release figures")

# qvl_test_timeout(<out-var> <seconds>): a CTest TIMEOUT of <seconds> at Release speed, scaled, in whole seconds.
function(qvl_test_timeout out seconds)
  # math() is integer-only: the scale in thousandths ("1" before the fraction keeps "05" from reading as octal).
  string(REGEX MATCH "^([0-9]*)\\.?([0-9]*)$" _ "${QVL_TEST_TIME_SCALE_NOW}")
  set(whole "0${CMAKE_MATCH_1}")
  string(SUBSTRING "${CMAKE_MATCH_2}000" 0 3 frac)
  math(EXPR t "(${seconds} * ${QVL_TEST_BUILD_SLOWDOWN} * (${whole} * 1000 + 1${frac} - 1000) + 999) / 1000")
  set(${out} ${t} PARENT_SCOPE)
endfunction()
