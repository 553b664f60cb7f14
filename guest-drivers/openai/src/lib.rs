//! The built-in `openai` driver: the Chat Completions API, as spoken by OpenAI and by
//! most local model servers (vLLM, Ollama, llama.cpp, LM Studio).

mod wire;

mur_driver_kit::export_driver!(wire::OpenAi);
