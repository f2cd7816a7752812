//! Model definitions written with the frontend (MLP, BERT/MiniLM, GPT-2, LLaMA). Not built
//! yet: they arrive with the frontend issue.
