# QVL_SANITIZE: build every target of this directory with sanitizers.
#   ""        none (the release build)
#   address   AddressSanitizer + UndefinedBehaviorSanitizer; any finding aborts the program (no recovery)
#   thread    ThreadSanitizer (the scheduler and server tests)
# Included from CMakeLists.txt before the first target; the presets asan/tsan/fuzz set it.
set(QVL_SANITIZE "" CACHE STRING "Sanitizers for every target: empty, address (ASan+UBSan) or thread (TSan)")
set_property(CACHE QVL_SANITIZE PROPERTY STRINGS "" address thread)

if(QVL_SANITIZE STREQUAL "address")
  set(QVL_SANITIZE_FLAGS -fsanitize=address,undefined -fno-sanitize-recover=all)
elseif(QVL_SANITIZE STREQUAL "thread")
  set(QVL_SANITIZE_FLAGS -fsanitize=thread)
elseif(NOT QVL_SANITIZE STREQUAL "")
  message(FATAL_ERROR "QVL_SANITIZE='${QVL_SANITIZE}': expected empty, address or thread")
endif()

if(QVL_SANITIZE_FLAGS)
  # Frame pointers: whole stack traces in reports at little cost.
  add_compile_options(${QVL_SANITIZE_FLAGS} -fno-omit-frame-pointer)
  add_link_options(${QVL_SANITIZE_FLAGS})
  message(STATUS "qvl: sanitizers: ${QVL_SANITIZE_FLAGS}")
endif()
