# Read by llama-cpp-python's build of llama.cpp (scripts/setup.sh passes it as
# CMAKE_PROJECT_INCLUDE_BEFORE, so it runs at each project() call). llama-cpp-python turns
# llama.cpp's common library on for its multimodal library, which a text model never loads
# (LLAVA_BUILD=OFF): the Python bindings load only libllama and ggml. Without common (and
# the HTTP library only common uses) the compile takes half the CPU time.
set(LLAMA_BUILD_COMMON OFF CACHE BOOL "llama.cpp: build the common library" FORCE)
