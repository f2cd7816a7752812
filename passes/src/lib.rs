//! Graph passes (clean-up, egg fusion, elementwise fusion, autodiff). Not built yet: they
//! arrive with the passes issue.
