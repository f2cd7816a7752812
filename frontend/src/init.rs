//! Parameter initialisers. Each parameter's values come from its own ChaCha8 stream, seeded
//! by the trace seed and the parameter's name, so they do not depend on declaration order and
//! are the same on every platform.

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Normal, Uniform};
use rustral_ir::DType;

/// How a parameter is initialised when no weights are loaded.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Init {
    /// All zeros.
    Zeros,
    /// All ones.
    Ones,
    /// Normal with mean 0.
    Normal {
        /// Standard deviation.
        std: f64,
    },
    /// Uniform in `[low, high)`.
    Uniform {
        /// Inclusive lower bound.
        low: f64,
        /// Exclusive upper bound.
        high: f64,
    },
}

/// A declared parameter: its full name, type and initialiser.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ParamSpec {
    /// Full name (`encoder.layer.0.attention.self.query.weight`).
    pub name: String,
    /// Element type.
    pub dtype: DType,
    /// Static shape.
    pub shape: Vec<usize>,
    /// Initialiser.
    pub init: Init,
}

impl ParamSpec {
    /// Element count.
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    /// Values drawn from the initialiser with the stream for (`seed`, name).
    pub fn initial_values(&self, seed: u64) -> Vec<f64> {
        let n = self.numel();
        let mut rng = ChaCha8Rng::seed_from_u64(splitmix64(seed ^ fnv1a(&self.name)));
        match self.init {
            Init::Zeros => vec![0.0; n],
            Init::Ones => vec![1.0; n],
            Init::Normal { std } => match Normal::new(0.0, std) {
                Ok(d) => (0..n).map(|_| d.sample(&mut rng)).collect(),
                Err(_) => vec![f64::NAN; n],
            },
            Init::Uniform { low, high } => match Uniform::new(low, high) {
                Ok(d) => (0..n).map(|_| d.sample(&mut rng)).collect(),
                Err(_) => vec![f64::NAN; n],
            },
        }
    }
}

/// FNV-1a, a stable string hash (std's hashers may change between releases).
pub(crate) fn fnv1a(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3))
}

/// SplitMix64's finaliser: spreads nearby seeds far apart.
pub(crate) fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}
