# biaskit_add_plugin(<name>
#                    SOURCES <host C sources>...
#                    [CUDA_SOURCES <.cu sources>...]
#                    [OUTPUT_DIRECTORY <dir>]
#                    [INSTALL_DESTINATION <dir> | NO_INSTALL])
#
# Builds the plugin <name> as the loadable module biaskit_<name>.so (target biaskit_plugin_<name>)
# against the SDK headers. Only the entry symbol is exported (hidden visibility for the rest), and,
# for a plugin written with <biaskit/table_plugin.h>, biaskit_tp_emulation (its CUDA kernels run on the
# host, for `biaskit check`).
# CUDA_SOURCES are compiled when the calling project has enabled the CUDA language; the plugin is
# then compiled with BIASKIT_WITH_CUDA=1 and linked to the shared CUDA runtime. Without CUDA the
# plugin is host-only and the engine runs its host functions.
# Installed (unless NO_INSTALL) into INSTALL_DESTINATION, default lib/biaskit/plugins under the
# install prefix, where the engine looks for plugins.
#
# CUDA architectures: the kernels are built for 80;90 (Ampere and Hopper, as the engine) unless the
# project chose: BIASKIT_CUDA_ARCHITECTURES, when set, always wins (e.g. -DBIASKIT_CUDA_ARCHITECTURES=86);
# otherwise an explicit CMAKE_CUDA_ARCHITECTURES (-D on the command line, set() in the project, or the
# CUDAARCHS environment variable) is respected. Only the value CMake fills in by itself when nothing
# was chosen (the oldest architecture the compiler supports, e.g. sm_75 for CUDA 13) is replaced.

# TRUE in `out` when the project chose its CUDA architectures, FALSE when CMAKE_CUDA_ARCHITECTURES
# holds the default enable_language(CUDA) filled in (a cache entry with CMake's own help string).
function(_biaskit_cuda_architectures_chosen out)
  set(chosen TRUE)
  get_property(help CACHE CMAKE_CUDA_ARCHITECTURES PROPERTY HELPSTRING)
  get_property(cached CACHE CMAKE_CUDA_ARCHITECTURES PROPERTY VALUE)
  if(NOT DEFINED ENV{CUDAARCHS} AND help STREQUAL "CUDA architectures"
     AND "${CMAKE_CUDA_ARCHITECTURES}" STREQUAL "${cached}")
    set(chosen FALSE)
  endif()
  set(${out} ${chosen} PARENT_SCOPE)
endfunction()

function(biaskit_add_plugin name)
  cmake_parse_arguments(ARG "NO_INSTALL" "OUTPUT_DIRECTORY;INSTALL_DESTINATION" "SOURCES;CUDA_SOURCES" ${ARGN})
  if(NOT ARG_SOURCES)
    message(FATAL_ERROR "biaskit_add_plugin(${name}): SOURCES is required (the host C sources)")
  endif()
  if(NOT name MATCHES "^[a-z0-9_-]+$")
    message(FATAL_ERROR "biaskit_add_plugin(${name}): a plugin name is lower-case letters, digits, '_' and '-'")
  endif()
  set(target biaskit_plugin_${name})
  add_library(${target} MODULE ${ARG_SOURCES})
  set_target_properties(${target} PROPERTIES
    PREFIX ""
    OUTPUT_NAME "biaskit_${name}"
    C_STANDARD 11
    C_STANDARD_REQUIRED ON
    C_VISIBILITY_PRESET hidden
    CXX_VISIBILITY_PRESET hidden
    CUDA_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON
    INSTALL_RPATH_USE_LINK_PATH ON)
  target_link_libraries(${target} PRIVATE biaskit::sdk)
  if(NOT DEFINED BIASKIT_PLUGIN_OUTPUT_DIR AND NOT ARG_OUTPUT_DIRECTORY)
    set(ARG_OUTPUT_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
  elseif(NOT ARG_OUTPUT_DIRECTORY)
    set(ARG_OUTPUT_DIRECTORY ${BIASKIT_PLUGIN_OUTPUT_DIR})
  endif()
  set_target_properties(${target} PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${ARG_OUTPUT_DIRECTORY})

  if(ARG_CUDA_SOURCES)
    get_property(_biaskit_langs GLOBAL PROPERTY ENABLED_LANGUAGES)
    if("CUDA" IN_LIST _biaskit_langs)
      target_sources(${target} PRIVATE ${ARG_CUDA_SOURCES})
      target_compile_definitions(${target} PRIVATE BIASKIT_WITH_CUDA=1)
      set_target_properties(${target} PROPERTIES CUDA_RUNTIME_LIBRARY Shared)
      _biaskit_cuda_architectures_chosen(_biaskit_chosen)
      if(DEFINED BIASKIT_CUDA_ARCHITECTURES)
        set_target_properties(${target} PROPERTIES CUDA_ARCHITECTURES "${BIASKIT_CUDA_ARCHITECTURES}")
      elseif(NOT _biaskit_chosen)
        set_target_properties(${target} PROPERTIES CUDA_ARCHITECTURES "80;90")
      endif()
      get_target_property(_biaskit_archs ${target} CUDA_ARCHITECTURES)
      message(STATUS "biaskit plugin ${name}: CUDA architectures ${_biaskit_archs}")
    else()
      message(STATUS "biaskit plugin ${name}: CUDA not enabled in this project, building host code only")
    endif()
  endif()

  if(NOT ARG_NO_INSTALL)
    if(NOT ARG_INSTALL_DESTINATION)
      set(ARG_INSTALL_DESTINATION lib/biaskit/plugins)
    endif()
    install(TARGETS ${target} LIBRARY DESTINATION ${ARG_INSTALL_DESTINATION})
  endif()
endfunction()
