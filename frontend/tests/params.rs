//! The parameter store: safetensors round trips and strict loading.

use rustral_frontend::{DType, Dim, Error, Init, ParamSpec, ParamStore, ParamValue, TraceOptions, trace};

fn specs() -> Vec<ParamSpec> {
    trace(TraceOptions::default(), |ctx| {
        let a = ctx
            .scope("layer.0", |ctx| ctx.param("weight", &[Dim::fixed(2), Dim::fixed(3)], Init::Normal { std: 1.0 }))?;
        let b = ctx.scope("layer.0", |ctx| ctx.param("bias", &[Dim::fixed(3)], Init::Ones))?;
        Ok(vec![a, b])
    })
    .unwrap()
    .params
}

#[test]
fn safetensors_round_trip() {
    let store = ParamStore::init(&specs(), 3);
    let bytes = store.to_safetensors_bytes().unwrap();
    let back = ParamStore::from_safetensors_bytes(&bytes, &specs(), &[]).unwrap();
    // f32 storage: values survive exactly once rounded to f32.
    for (name, v) in store.iter() {
        let got = back.get(name).unwrap();
        assert_eq!(got.shape, v.shape);
        assert!(got.data.iter().zip(&v.data).all(|(a, b)| *a == (*b as f32) as f64), "{name}");
    }
    let dir = std::env::temp_dir().join(format!("rustral-params-{}.safetensors", std::process::id()));
    back.save_safetensors(&dir).unwrap();
    assert_eq!(ParamStore::load_safetensors(&dir, &specs(), &[]).unwrap(), back);
    std::fs::remove_file(dir).unwrap();
}

fn store_with(extra: Option<(&str, ParamValue)>, drop: Option<&str>) -> Vec<u8> {
    let mut store = ParamStore::init(&specs(), 3);
    if let Some((n, v)) = extra {
        store.insert(n, v);
    }
    let mut bytes = store.to_safetensors_bytes().unwrap();
    if let Some(d) = drop {
        let kept: Vec<ParamSpec> = specs().into_iter().filter(|s| s.name != d).collect();
        bytes = ParamStore::init(&kept, 3).to_safetensors_bytes().unwrap();
    }
    bytes
}

#[test]
fn missing_extra_and_misshaped_weights_are_named() {
    let missing =
        ParamStore::from_safetensors_bytes(&store_with(None, Some("layer.0.bias")), &specs(), &[]).unwrap_err();
    assert_eq!(missing.to_string(), "parameter \"layer.0.bias\": missing from the weights (expected f32 [3])");

    let extra = ParamValue { dtype: DType::I64, shape: vec![1, 4], data: vec![0.0, 1.0, 2.0, 3.0] };
    let bytes = store_with(Some(("position_ids", extra)), None);
    let err = ParamStore::from_safetensors_bytes(&bytes, &specs(), &[]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "parameter \"position_ids\": in the weights but not declared by the model (ignore it explicitly if expected)"
    );
    assert!(ParamStore::from_safetensors_bytes(&bytes, &specs(), &["position_ids"]).is_ok());
    assert!(ParamStore::from_safetensors_bytes(&bytes, &specs(), &["position*"]).is_ok());

    let wrong = ParamValue { dtype: DType::F32, shape: vec![3, 2], data: vec![0.0; 6] };
    let bytes = store_with(Some(("layer.0.weight", wrong)), None);
    let err = ParamStore::from_safetensors_bytes(&bytes, &specs(), &[]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "parameter \"layer.0.weight\": shape [3, 2] in the weights, but the model declares [2, 3]"
    );

    assert!(matches!(ParamStore::from_safetensors_bytes(b"garbage", &specs(), &[]), Err(Error::File { .. })));
}
