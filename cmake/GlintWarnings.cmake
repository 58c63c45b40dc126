# Warnings for every glint target: glint_target_warnings(<target>) turns on -Wall -Wextra for C++
# and for the host code of CUDA sources. GLINT_WERROR (CI: scripts/test.sh) makes them errors.
option(GLINT_WERROR "Treat compiler warnings as errors" OFF)

function(glint_target_warnings target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra>
    $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra>)
  if(GLINT_WERROR)
    target_compile_options(${target} PRIVATE
      $<$<COMPILE_LANGUAGE:CXX>:-Werror>
      $<$<COMPILE_LANGUAGE:CUDA>:-Werror=all-warnings -Xcompiler=-Werror>)
  endif()
endfunction()
