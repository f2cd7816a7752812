//! The tracing frontend (`ForwardCtx`, tensors, `nn` layers). Not built yet: it arrives with
//! the frontend issue. Until then graphs are built with `rustral_ir::Graph` directly.
