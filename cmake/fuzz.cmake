# Fuzz targets: tests/fuzz/fuzz_<name>.cpp, each defining LLVMFuzzerTestOneInput, with its seed corpus in
# tests/fuzz/corpus/<name>/. Adding a target is one line at the end of this file.
#   QVL_FUZZ=ON (clang, the `fuzz` preset): each target is a libFuzzer binary, and the CTest test fuzz_<name>
#     runs it for QVL_FUZZ_SECONDS from its committed corpus (new inputs go to the build dir, never the tree).
#   otherwise (gcc, the default): each target links tests/fuzz/replay_main.cpp instead and the CTest test
#     fuzz_replay_<name> feeds it every file of its corpus once, so the ordinary test run replays them all.
# Included from CMakeLists.txt after the targets it links against (qvl_core, and qvl_engine below it).
option(QVL_FUZZ "Build the fuzz targets as libFuzzer binaries (needs clang)" OFF)
set(QVL_FUZZ_SECONDS 20 CACHE STRING "How long each fuzz_<name> CTest test fuzzes (QVL_FUZZ=ON)")

if(QVL_FUZZ AND NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
  message(FATAL_ERROR "QVL_FUZZ=ON needs clang (libFuzzer): cmake --preset fuzz uses clang++-14")
endif()
if(NOT QVL_FUZZ AND NOT QVL_BUILD_TESTS)
  return()
endif()
enable_testing()

set(QVL_FUZZ_SOURCE_DIR ${CMAKE_CURRENT_SOURCE_DIR}/tests/fuzz)
if(QVL_FUZZ)
  # Coverage feedback from the library code the targets exercise, except the compute kernels (src/kernels/):
  # their branches follow the shapes, not the input's bytes, and the counters and a call per compare in every
  # inner loop made the ASan suite's model tests 2.3x slower (a 512-token decode: 39.8 -> 17.7 s). They keep
  # ASan and UBSan.
  target_compile_options(qvl_engine PRIVATE -fsanitize=fuzzer-no-link)
  target_compile_options(qvl_core PRIVATE -fsanitize=fuzzer-no-link)
  file(GLOB QVL_KERNEL_SOURCES CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/src/kernels/*.cpp)
  set_property(SOURCE ${QVL_KERNEL_SOURCES} APPEND PROPERTY COMPILE_OPTIONS
               -fno-sanitize-coverage=inline-8bit-counters,indirect-calls,trace-cmp,pc-table)
endif()
add_custom_target(qvl_fuzz)  # builds every fuzz target

function(qvl_add_fuzz_target name)
  set(target fuzz_${name})
  set(corpus ${QVL_FUZZ_SOURCE_DIR}/corpus/${name})
  add_executable(${target} ${QVL_FUZZ_SOURCE_DIR}/fuzz_${name}.cpp)
  target_include_directories(${target} PRIVATE ${QVL_FUZZ_SOURCE_DIR})
  target_link_libraries(${target} PRIVATE qvl_core)
  target_compile_definitions(${target} PRIVATE
    QVL_TEST_DATA_DIR="${CMAKE_CURRENT_SOURCE_DIR}/tests/data"
    QVL_MODEL_FILES_DIR="${QVL_MODEL_FILES}")
  add_dependencies(qvl_fuzz ${target})
  if(QVL_FUZZ)
    target_compile_options(${target} PRIVATE -fsanitize=fuzzer)
    target_link_options(${target} PRIVATE -fsanitize=fuzzer)
    set(work ${CMAKE_CURRENT_BINARY_DIR}/fuzz/${name})
    file(MAKE_DIRECTORY ${work}/corpus ${work}/findings)
    add_test(NAME fuzz_${name}
             COMMAND ${target} -max_total_time=${QVL_FUZZ_SECONDS} -timeout=25 -rss_limit_mb=4096
                     -print_final_stats=1 -artifact_prefix=${work}/findings/ ${work}/corpus ${corpus})
    qvl_test_timeout(timeout 300)  # cmake/test_timing.cmake
    # COST: started before the short tests (a fresh clone has no timings for ctest to order by; CMakeLists.txt)
    set_tests_properties(fuzz_${name} PROPERTIES TIMEOUT ${timeout} LABELS fuzz COST ${QVL_FUZZ_SECONDS})
  else()
    target_sources(${target} PRIVATE ${QVL_FUZZ_SOURCE_DIR}/replay_main.cpp)
    add_test(NAME fuzz_replay_${name} COMMAND ${target} ${corpus})
    set_tests_properties(fuzz_replay_${name} PROPERTIES LABELS fuzz)
  endif()
endfunction()

qvl_add_fuzz_target(images)       # decode_image: JPEG, PNG, WebP, GIF, BMP
qvl_add_fuzz_target(exif)         # EXIF / XMP / raw-profile orientation inside valid images
qvl_add_fuzz_target(safetensors)  # safetensors header and shard index
qvl_add_fuzz_target(quantized)    # quantized weights (U8 blocks + metadata) bound and read
qvl_add_fuzz_target(chat)         # chat JSON -> messages -> chat template
qvl_add_fuzz_target(tokenizer)    # tokenizer.json's BPE on any bytes, both modes
qvl_add_fuzz_target(tokenizer_json)  # tokenizer.json itself, read as a stream, against nlohmann's DOM
qvl_add_fuzz_target(config)       # config.json
qvl_add_fuzz_target(api_json)     # request bodies: JSON limits + parse -> OpenAI, Ollama chat/generate, /chat
qvl_add_fuzz_target(multipart)    # multipart/form-data bodies (POST /v1/vision/completion)
qvl_add_fuzz_target(json_schema)  # structured output: schema compiler + byte acceptor (answers that pass must parse)
qvl_add_fuzz_target(gguf)         # GGUF header, metadata, tensor table; dequantization of what it hands out
qvl_add_fuzz_target(http)         # raw requests: header bytes, framing fields, chunked body lines
qvl_add_fuzz_target(documents)    # PDFs: pdfinfo/pdftoppm answers, page selections, file parts, the confined worker
qvl_add_fuzz_target(retrieval)    # /v1/embeddings, /api/embed, /v1/rerank bodies -> inputs -> prompts
if(AV_FOUND)
  qvl_add_fuzz_target(video)      # video containers: probe, sampling, decode, resize, patchify
endif()

# Open findings (tests/fuzz/findings/README.md) that a bounded run finds again within seconds: their bounded
# run stays off until the bug is fixed (the corpus replay still runs). Re-enable by deleting the name here.
set(QVL_FUZZ_OPEN_FINDINGS)
if(QVL_FUZZ)
  foreach(name ${QVL_FUZZ_OPEN_FINDINGS})
    set_tests_properties(fuzz_${name} PROPERTIES DISABLED TRUE)
  endforeach()
endif()
