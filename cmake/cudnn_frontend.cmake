# cuDNN's C++ frontend: the header-only graph API behind cuDNN's fused attention
# (runtime/cuda/cudnn_attention.cc). Debian does not package it; its PyPI wheel ships the headers
# under include/, so the build fetches one pinned release of that wheel into the build folder
# and uses only its headers (nothing of the wheel is linked or installed).
#   -DAMPC_CUDNN_FRONTEND=OFF              build without it (the attention kernels' other paths)
#   -DAMPC_CUDNN_FRONTEND_DIR=<include>    a folder holding cudnn_frontend.h, instead of the fetch
# Sets AMPC_CUDNN_FRONTEND_INCLUDE_DIR when the headers are there.
option(AMPC_CUDNN_FRONTEND "Use cuDNN's fused attention through cuDNN's C++ frontend" ON)
set(AMPC_CUDNN_FRONTEND_DIR "" CACHE PATH
    "A folder holding cudnn_frontend.h (empty: fetch the pinned PyPI wheel)")
set(AMPC_CUDNN_FRONTEND_INCLUDE_DIR "")
if(AMPC_CUDNN_FRONTEND AND AMPC_CUDNN_FRONTEND_DIR)
  if(NOT EXISTS "${AMPC_CUDNN_FRONTEND_DIR}/cudnn_frontend.h")
    message(FATAL_ERROR "ampc: AMPC_CUDNN_FRONTEND_DIR=${AMPC_CUDNN_FRONTEND_DIR} holds no "
                        "cudnn_frontend.h")
  endif()
  set(AMPC_CUDNN_FRONTEND_INCLUDE_DIR "${AMPC_CUDNN_FRONTEND_DIR}")
elseif(AMPC_CUDNN_FRONTEND)
  set(version 1.32.0)
  set(wheel nvidia_cudnn_frontend-${version}-cp311-cp311-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl)
  set(url "https://files.pythonhosted.org/packages/11/02/660e2dd9f9d9f940e1641443771730612c3aadaafbc5ef7a93cc313d519d/${wheel}")
  set(sha256 c6006556017a4d1c914c52a556c71b1267f2d6a0500f742e7b4edef539878df0)
  set(root "${PROJECT_BINARY_DIR}/_deps/cudnn_frontend-${version}")
  if(NOT EXISTS "${root}/include/cudnn_frontend.h")
    message(STATUS "ampc: fetching cuDNN's frontend ${version} (its PyPI wheel's headers)")
    file(DOWNLOAD "${url}" "${root}.whl" EXPECTED_HASH SHA256=${sha256} STATUS fetched
         TLS_VERIFY ON)
    list(GET fetched 0 code)
    if(code EQUAL 0)
      file(ARCHIVE_EXTRACT INPUT "${root}.whl" DESTINATION "${root}" PATTERNS "include/*")
      file(REMOVE "${root}.whl")
    else()
      list(GET fetched 1 why)
      file(REMOVE "${root}.whl")
      message(WARNING "ampc: could not fetch cuDNN's frontend (${why}); building without cuDNN's "
                      "fused attention (AMPC_CUDA_ATTENTION=cudnn then falls back). Point "
                      "-DAMPC_CUDNN_FRONTEND_DIR at its headers, or configure with "
                      "-DAMPC_CUDNN_FRONTEND=OFF to silence this.")
    endif()
  endif()
  if(EXISTS "${root}/include/cudnn_frontend.h")
    set(AMPC_CUDNN_FRONTEND_INCLUDE_DIR "${root}/include")
  endif()
endif()
