// tk_hls.h: what every kernel tensorkiln's fpga_hls plugin writes includes first (also its
// precompiled header). Under Vitis HLS (__SYNTHESIS__) streams are hls::stream; in
// C-simulation they are tk::stream (tk_stream.h), which enforces its depth and raises on
// a read from an empty stream, and dataflow stages run as concurrent threads.
#ifndef TK_HLS_H
#define TK_HLS_H

#include <stdint.h>
#include <stdbool.h>
#include <stdlib.h>
#include <math.h>
#include <cmath>
#include <ap_int.h>
#include <ap_fixed.h>

#ifdef __SYNTHESIS__
#include <hls_stream.h>
namespace tk {
// array-style access to an hls::stream, in the order the kernel wrote: s[i] = v writes, s[i] reads
template <typename T> struct stream_ref {
    hls::stream<T>& s;
    void operator=(const T& v) { s.write(v); }
    operator T() { return s.read(); }
};
template <typename T> struct stream : hls::stream<T> {
    stream(const char*, unsigned) {}
    stream_ref<T> operator[](long) { return stream_ref<T>{*this}; }
};
}  // namespace tk
#define TK_DATAFLOW_REGION(region)
#define TK_STAGE_BEGIN(region) {
#define TK_STAGE_END }
#define TK_DATAFLOW_JOIN(region)
#else
#include "tk_stream.h"
#define TK_DATAFLOW_REGION(region) tk::dataflow region
#define TK_STAGE_BEGIN(region) region.spawn([&]() {
#define TK_STAGE_END })
#define TK_DATAFLOW_JOIN(region) region.join()
#endif

#endif  // TK_HLS_H
