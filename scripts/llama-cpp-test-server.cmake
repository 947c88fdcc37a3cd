# Read by llama-cpp-python's build of llama.cpp, the test tools' OpenAI-compatible server
# (scripts/setup.sh passes it as CMAKE_PROJECT_INCLUDE_BEFORE, so it runs at each
# project() call). Built for set-up time, not serving speed: in the tests it answers a
# few short requests of a 135M model. Measured side by side on 2 cores
# (perf/results/ci.md): 207 s and 396 CPU-s as llama-cpp-python builds it less common,
# 117 s and 217 CPU-s with the two settings below; the tests' server time did not change.
#
# llama-cpp-python turns llama.cpp's common library on for its multimodal library, which a
# text model never loads (LLAVA_BUILD=OFF): the Python bindings load only libllama and
# ggml, so common (and the HTTP library only common uses) is not built.
set(LLAMA_BUILD_COMMON OFF CACHE BOOL "llama.cpp: build the common library" FORCE)
# Source files compiled in batches (each of the 157 model files includes the same headers)
# and at -O1. SmolLM2's logits of a 23-token prompt: batched equal file by file bit for
# bit; -O1 against -O3 differ in rounding (up to 0.83, activations being quantised to
# 8 bits), as two builds may; both complete "The capital of France is" with " Paris.".
set(CMAKE_UNITY_BUILD ON CACHE BOOL "compile sources in batches" FORCE)
set(CMAKE_C_FLAGS_RELEASE "-O1 -DNDEBUG" CACHE STRING "C flags of a release build" FORCE)
set(CMAKE_CXX_FLAGS_RELEASE "-O1 -DNDEBUG" CACHE STRING "C++ flags of a release build" FORCE)
