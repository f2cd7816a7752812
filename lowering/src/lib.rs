//! Lowering of graphs to target programs (CPU, Candle, WGSL). Not built yet: it arrives with
//! the CPU target issue.
