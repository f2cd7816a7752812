//! A graph that uses every op and attribute form of the text IR, shared by the text and
//! serialization tests (and the source of the fuzzers' `all_forms` seed).

/// Every op and attribute form, printed exactly as `print` prints it.
pub const ALL_FORMS: &str = r#"graph "forms" {
  %0: f32[2, 3] = input "x"
  %1: f32[2, 3] = const [1.0, -0.0, inf, -inf, nan, 1e-7]
  %2: i64[2] = iota {axis=0}
  %3: f32[2, 3] = gather %1, %2 {axis=0}
  %4: f32[4, 3] = concat %0, %3 {axis=0}
  %5: f32[1, 3] = slice %4 {axis=0, start=1, end=2}
  %6: f32[3, 1] = permute %5 {perm=[1, 0]}
  %7: f32[3] = reshape %6 {shape=[3]}
  %8: f32[2, 3] = broadcast_to %7 {shape=[2, 3]}
  %9: bool[2, 3] = lt %8, %0
  %10: f32[2, 3] = where %9, %8, %0
  %11: f16[2, 3] = cast %10 {to=f16}
  %12: f32[3] = param "g"
  %13: f32[2, 3] = layer_norm %10, %12, %12 {eps=1e-5}
  %14: f32[2, 3] = rms_norm %13, %12 {eps=1e-6}
  %15: f32[2, 3] = softmax %14 {axis=1}
  %16: f32[2, 3] = gelu %15 {approx=erf}
  %17: f32[2, 3] = silu %16
  %18: f32[3, 3] = matmul_epilogue %6, %5, %7 {activation=gelu_erf}
  %19: f32[2, 3] = attention %0, %0, %0 {scale=0.5, causal=true}
  %20: f16[2, 3] = fused_elementwise %0, %1 {t0 = arg 0; t1 = arg 1; t2 = const 2.0 f32; t3 = mul t0, t2; t4 = tanh t3; t5 = gt t4, t1; t6 = where t5, t4, t1; t7 = cast t6 to f16}
  %21: f32[2, 1] = reduce_mean %17 {axes=[1], keepdim=true}
  %22: f32[3, 3] = matmul %18, %18
  output "a" = %11
  output "b" = %20
}
"#;
