//! The safetensors loader on arbitrary bytes, against a fixed model's specs (a weight and a
//! bias, so that seeds reach the decoding and the checks) and against specs made from the
//! file's own header (so that every dtype and shape it names is decoded): Ok or an error.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rustral_frontend::{Init, ParamSpec, ParamStore};
use rustral_ir::DType;

fn spec(name: &str, dtype: DType, shape: &[usize]) -> ParamSpec {
    ParamSpec { name: name.into(), dtype, shape: shape.to_vec(), init: Init::Zeros }
}

fuzz_target!(|data: &[u8]| {
    let fixed = [spec("w", DType::F32, &[2, 3]), spec("b", DType::F32, &[3]), spec("ids", DType::I64, &[2])];
    let _ = ParamStore::from_safetensors_bytes(data, &fixed, &["extra.*"]);
    // The file's own names and shapes, each as f32 and as i64.
    let own: Option<Vec<(String, Vec<usize>)>> = safetensors::SafeTensors::deserialize(data)
        .ok()
        .map(|st| st.tensors().into_iter().map(|(n, v)| (n, v.shape().to_vec())).collect());
    if let Some(own) = own {
        for dtype in [DType::F32, DType::I64] {
            let specs: Vec<ParamSpec> = own.iter().map(|(n, s)| spec(n, dtype, s)).collect();
            if let Ok(store) = ParamStore::from_safetensors_bytes(data, &specs, &[]) {
                store.check(&specs).expect("a loaded store passes the load's own checks");
            }
        }
    }
});
