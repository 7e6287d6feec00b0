"""scan_vectors: a block scan that walks a row in chunks of the block's width takes four consecutive elements per
thread. The recogniser takes the corpus's segmented_scan and chunked scans written otherwise (float, the index
written out, offsets into the arrays, an if-else load, the carry added on either side), refuses what it cannot
rewrite with the reason, and the rewrites compile with NVRTC across their space. On the CPU emulation of
test_rules_scan.py (one host thread per CUDA thread) they give the prefix sums at block sizes of 1 to 32 warps,
over rows whose length is and is not a multiple of four (so both the vector path and the element path run). The
GPU verifies them against the submitted kernels (tests/gpu/test_rules_shapes_verified.py)."""
import numpy as np
import pytest

from services.generator import rules
from services.generator.rules.cuda_text import mask, normalised
from tests.unit.rules_variants import ROW_CUMSUM
from tests.unit.test_rules_scan import BLOCKS, HELPER, SEGMENTED, build, edited, launch
from tests.unit.test_rules_shapes import assert_compiles_and_keeps_signature
from tests.unit.test_rules_vectorize16 import needs_gxx

LOAD = "buf[threadIdx.x] = i < seg ? src[i] : 0;"
STORE = "if (i < seg) dst[i] = carry + buf[threadIdx.x];"
CARRY = "carry += buf[blockDim.x - 1];"

RECOGNISED = {
    "segmented_scan": SEGMENTED,
    "float_by_the_define_index_written_out": ROW_CUMSUM,
    "if_else_load": edited(SEGMENTED, LOAD, "if (i < seg) buf[threadIdx.x] = src[i];\n        else buf[threadIdx.x] = 0;"),
    "carry_on_the_right": edited(edited(SEGMENTED, STORE, "if (seg > i) { dst[i] = buf[threadIdx.x] + carry; }"),
                                 CARRY, "carry = carry + buf[blockDim.x - 1];"),
    "offsets_into_the_arrays": edited(edited(SEGMENTED, LOAD, "buf[threadIdx.x] = (i < seg) ? in[(size_t)blockIdx.x * "
                                                              "seg + i] : 0;"),
                                      STORE, "if (i < seg) out[blockIdx.x * (size_t)seg + i] = carry + buf[threadIdx.x];"),
}
REFUSED = {
    "buf_read_after_the_loop": (edited(SEGMENTED, "totals[blockIdx.x] = carry;",
                                       "totals[blockIdx.x] = carry + buf[0] - buf[0];"),
                                "leaves buf holding the last chunk's scan, which the code after it reads"),
    "another_statement": (edited(SEGMENTED, CARRY, CARRY + "\n        if (i == 0) totals[blockIdx.x] = 0;"),
                          "is not a load of buf[threadIdx.x], a barrier, the scan, a store, the carry's update"),
    "a_narrower_row": (edited(edited(SEGMENTED, "const int *in", "const short *in"), "const int *src", "const short *src"),
                       "moves src (short) through buf (int): vectors of src would be another width"),
    "chunks_from_one": (edited(SEGMENTED, "int base = 0", "int base = 1"), "does not start a chunk at 0"),
    "chunks_two_blocks_apart": (edited(SEGMENTED, "base += blockDim.x", "base += 2 * blockDim.x"),
                                "does not step base by the block's width up to the row's length"),
    "ones_past_the_row": (edited(SEGMENTED, LOAD, LOAD.replace(": 0;", ": 1;")),
                          "does not load buf[threadIdx.x] from the row, zero past it"),
    "every_other_element": (edited(SEGMENTED, LOAD, LOAD.replace("src[i]", "src[2 * i]")),
                            "reaches the row through src[2 * i], not src[offset + i]"),
    "an_offset_that_would_not_add": (edited(SEGMENTED, LOAD, LOAD.replace("src[i]", "src[seg > 0 ? 0 : 1 + i]")),
                                     "reaches the row through src[seg > 0 ? 0 : 1 + i]"),
}


@pytest.mark.parametrize("case", list(RECOGNISED))
def test_chunked_scans_written_otherwise_are_recognised_and_compile_across_their_space(case):
    spec = RECOGNISED[case]
    assert rules.check("scan_vectors", spec, spec.as_candidate()) is None
    candidate = rules.apply("scan_vectors", spec, spec.as_candidate())
    code = mask(normalised(candidate.source))
    assert code.count("__shfl_up_sync") == 3 and "reinterpret_cast<const " in code
    assert "block_size_x % 32 == 0" in candidate.restrictions and "block_size_x <= 1024" in candidate.restrictions
    assert assert_compiles_and_keeps_signature(spec, candidate) >= 1


@pytest.mark.parametrize("case", list(REFUSED))
def test_what_is_not_a_chunked_scan_and_why(case):
    spec, reason = REFUSED[case]
    assert reason in (rules.check("scan_vectors", spec, spec.as_candidate()) or "applies")


def test_a_scan_of_one_chunk_is_left_to_shuffle_scan():
    assert "the block scan of s lies in no loop over chunks" in rules.check("scan_vectors", HELPER, HELPER.as_candidate())
    assert rules.check("shuffle_scan", HELPER, HELPER.as_candidate()) is None


def test_the_chunk_spans_four_block_widths_read_as_vectors_where_aligned():
    candidate = rules.apply("scan_vectors", SEGMENTED, SEGMENTED.as_candidate())
    code = mask(normalised(candidate.source))
    assert "for (int base = 0; base < seg; base += 4 * blockDim.x) {" in code
    assert "const int i = base + 4 * threadIdx.x;" in code
    assert ("if (i + 3 < seg && (reinterpret_cast<unsigned long long>(&src[i]) & 15) == 0) {\n"
            "            v = *reinterpret_cast<const int4 *>(&src[i]);") in code
    assert "*reinterpret_cast<int4 *>(&dst[i]) = v;" in code and "v.w = i + 3 < seg ? src[i + 3] : (int)0;" in code
    assert "buf[threadIdx.x" not in code and "carry += warp_sums[blockDim.x / 32 - 1];" in code


def test_the_two_scan_rewrites_are_alternatives():
    vectors = rules.apply("scan_vectors", SEGMENTED, SEGMENTED.as_candidate())
    shuffles = rules.apply("shuffle_scan", SEGMENTED, SEGMENTED.as_candidate())
    assert "carries scan_vectors" in rules.check("shuffle_scan", SEGMENTED, vectors)
    assert "carries shuffle_scan" in rules.check("scan_vectors", SEGMENTED, shuffles)


# --- the rewrites run on the CPU -----------------------------------------------------------------------------
@needs_gxx
@pytest.mark.parametrize("case", ["segmented_scan", "if_else_load", "carry_on_the_right", "offsets_into_the_arrays"])
def test_the_integer_rewrites_give_the_prefix_sums_at_every_block_size(tmp_path, case):
    """Rows of 1000 elements (each 16-byte aligned: the vector path), 1001 (most not: the element path) and 37
    (less than a chunk), each at block sizes of 1 to 32 warps."""
    candidate = rules.apply("scan_vectors", RECOGNISED[case], RECOGNISED[case].as_candidate())
    library = build(normalised(candidate.source), "segmented_scan", tmp_path)
    for seg in (1000, 1001, 37):
        segments = 3
        values = np.random.default_rng(seg).integers(-1000, 1000, (segments, seg), dtype=np.int32)
        for block in BLOCKS:
            out, totals, _ = launch(library, segments, block, np.zeros_like(values), np.zeros(segments, np.int32),
                                    values, seg)
            assert np.array_equal(out, np.cumsum(values, axis=1)), (seg, block)
            assert np.array_equal(totals, values.sum(axis=1)), (seg, block)
