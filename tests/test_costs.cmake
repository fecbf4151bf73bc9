# tessera: the order in which `ctest -j` starts the slowest tests (included by CMakeLists.txt once
# every test is added).
#
# ctest -j starts tests in decreasing COST. A fresh build directory, such as CI's, has no
# Testing/Temporary/CTestCostData.txt (what ctest learns from earlier runs), so without COST the
# tests start in the order they were added: the node tests last, and a long test that starts late
# runs alone on one core at the end while the other core has nothing left to do. Below, every test
# of about 10 s or more carries its seconds on the 2-core CI machine (ctest -j2), in the release
# build and in the sanitizer build (TESSERA_SANITIZE: several times slower, some workloads smaller).
# Only the order matters, not the exact numbers; but a COST also outranks the cost data of later
# runs in the same build directory, so keep it roughly current (re-measure: ctest -j2 from an empty
# Testing/, then sort -k3 -g Testing/Temporary/CTestCostData.txt). A name that no longer exists is
# ignored.
#
# Each entry: "test name|release seconds|sanitizer seconds" (0: no COST in that build).
set(tessera_test_costs
  "EngineStructuredOutput.DiffusionSchemaSuiteValidates|94|35"
  "EngineStructuredOutput.AutoregressiveSchemaSuiteValidates|43|22"
  "EngineStructuredOutput.DiffusionTokensPerForward|34|37"
  "EngineStructuredOutput.ChoicesRegexesAndTheEndOfTheOutput|10|8"
  "EngineStructuredOutput.GrammarOfAnotherEngineIsRefused|11|3"
  "EngineLazyGrammar.ChoicesAndDiffusionFollowTheSameRule|16|34"
  "EngineLazyGrammar.CallsValidateAndTheTextAroundThemIsFree|8|34"
  "EngineLogitBias.ForcesAndBansTokensOnEveryPath|16|6"
  "EngineDiffusionLogprobs.AreTheLogOfTheUnmaskingConfidences|8|5"
  "Families/EngineAutoregressive.SixtyFourConcurrentRequestsEqualEachAlone/\"qwen3_next\"|4|22"
  "Families/EngineAutoregressive.SixtyFourConcurrentRequestsEqualEachAlone/\"qwen3_5_moe\"|4|22"
  "Families/EngineDiffusion.SixtyFourConcurrentRequestsEqualEachAlone/\"qwen3_5_moe\"|5|40"
  "Families/EngineDiffusion.SixtyFourConcurrentRequestsEqualEachAlone/\"qwen3_moe\"|4|11"
  "Families/EngineDiffusion.SeededSamplingReproducesAndSeedsDiffer/\"qwen3_5_moe\"|9|3"
  "Families/EngineDiffusion.SeededSamplingReproducesAndSeedsDiffer/\"qwen3_moe\"|8|3"
  "GrammarSchemaSuite.RandomWalksValidateWithPythonJsonschema|12|31"
  "GrammarQwen3Masks.RegexMasksEqualPcre2PartialMatching|2|30"
  "GrammarQwen3Masks.EqualBruteForce|3|26"
  "GrammarCore.Utf8ExpressionsMatchExactlyTheValidEncodings|1|15"
  "CliStrictTools|25|69"
  # CliFaults: release seconds of one run on the shared machine (2026-12-05); the sanitizer build's not
  # measured yet (0).
  "CliFaults.SigkillEndsStreamsAtOnceAndARestartTakesThePort|15|0"
  "CliFaults.SigtermFinishesStreamsThenExitsZero|15|0"
  "CliFaults.ModelDirectoryRemovedKeepsServingFromMemory|9|0"
  "CliFaults.AccessLogOnAFullDiskLosesLinesNotRequests|9|0"
  "CliFaults.StderrPipeWithoutAReaderDoesNotKillTheServer|8|0"
  "CliFaults.TruncatedWeightsAreA503NamingTheFileNotACrash|8|0"
  "CliTokenizer.Qwen3GoldenThroughTheCli|27|55"
  "CliTokenizer.BytesTokenizerMatchesGolden|11|5"
  "CliInspect.StateSnapshotsFollowTheFlag|12|35"
  "CliInspect.ParameterCountsMatchPublishedSizes|6|15"
  "Cli.UsageErrorsAreOneLineAndExitTwo|13|6"
  "CliDiffusionErrors.BadParametersAreClearErrors|12|6"
  "CliKvCacheDType.Bf16OnTheCpuIsAClearError|10|6"
  "node_structured_output|7|39"
  "node_serve_operations|35|18"
  "node_chat_page|16|24"
  "node_serve_batching|15|31"
  "node_openai_client|8|15"
  "readme_quickstart|15|33"
)

set(tessera_costs_file "${CMAKE_BINARY_DIR}/test_costs.cmake")
set(tessera_costs_text "# Generated from tests/test_costs.cmake: COST of the tests discovered in the gtest binaries.\n")
foreach(entry IN LISTS tessera_test_costs)
  string(REPLACE "|" ";" fields "${entry}")
  list(GET fields 0 name)
  if(TESSERA_SANITIZE)
    list(GET fields 2 cost)
  else()
    list(GET fields 1 cost)
  endif()
  if(cost EQUAL 0)
    continue()
  endif()
  if(TEST "${name}")
    # Added with add_test (the node tests, readme_quickstart).
    set_tests_properties("${name}" PROPERTIES COST ${cost})
  else()
    # A gtest test exists only once ctest has read its binary's list: set in a file that ctest
    # includes after those lists (TEST_INCLUDE_FILES are read in the order they were added).
    string(APPEND tessera_costs_text "set_tests_properties([==[${name}]==] PROPERTIES COST ${cost})\n")
  endif()
endforeach()
file(WRITE "${tessera_costs_file}" "${tessera_costs_text}")
set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES "${tessera_costs_file}")
