// The small helpers every x86 integer GEMM tile uses: a 4-byte activation broadcast, the weight prefetch
// and a horizontal sum. Included by x86_avx2.cpp, x86_avxvnni.cpp and x86_avx512vnni.cpp inside their own
// anonymous namespaces (as x86_kquant_tiles.h is), so each gets a copy compiled with its own flags and
// internal linkage: no ODR trap (tests/check_isa_objects.sh). The includer includes <immintrin.h> and
// <cstring> first.
#pragma once

// Four activation values (one int32) broadcast to the 8 lanes, one per weight row of the group.
inline __m256i bcast4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

// Weight blocks are read once per activation row tile, in order (the groups of a thread's chunk follow
// each other in memory): asking for the block kPrefetchBlocks ahead keeps decode, which reads every
// weight once per token, at the memory bandwidth (LM head q4_0 GEMV 13.1 -> 8.1 ms, 21.5 GB/s; 8 blocks
// ahead gave 9.4 ms, 32 the same as 16; bench_kernels).
constexpr int kPrefetchBlocks = 16;
template <class Block>
inline void prefetch_ahead(const Block* w) {
  const char* p = reinterpret_cast<const char*>(w + kPrefetchBlocks);
  for (size_t off = 0; off < sizeof(Block); off += 64) _mm_prefetch(p + off, _MM_HINT_T0);
}

// The sum of a vector's 8 floats.
inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
