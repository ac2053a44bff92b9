// Loads a GGUF with llama.cpp (node-llama-cpp, prebuilt CPU binaries, nothing built or fetched at
// run time), evaluates fixed tokens and a few greedy steps, and prints one JSON line:
//   {"init_ms", "load_ms", "first_token_ms", "tokens": [...],
//    "steps": [{"token", "probabilities": [[id, p]...]}]}
// init_ms is loading llama.cpp itself; load_ms the model and its context; first_token_ms the
// model load through the first generated token (what a server's start waits for). The
// probabilities are llama.cpp's floats for the top candidates of each step, unrounded, so two
// loads of the same bytes with the same options compare exactly.
//
//   node eval.mjs MODEL [--no-mmap] [--steps N] [--threads N] [--top N]
import {getLlama, LlamaLogLevel} from "node-llama-cpp";

function parseArgs(argv) {
  const args = {model: null, useMmap: true, steps: 4, threads: 2, top: 8};
  for (let i = 0; i < argv.length; ++i) {
    const a = argv[i];
    if (a === "--no-mmap") args.useMmap = false;
    else if (a === "--steps") args.steps = Number(argv[++i]);
    else if (a === "--threads") args.threads = Number(argv[++i]);
    else if (a === "--top") args.top = Number(argv[++i]);
    else if (a === "--help" || a === "-h") args.help = true;
    else if (args.model === null) args.model = a;
    else throw new Error(`unexpected argument '${a}'`);
  }
  return args;
}

const usage = "usage: node eval.mjs MODEL [--no-mmap] [--steps N] [--threads N] [--top N]";
let args;
try {
  args = parseArgs(process.argv.slice(2));
} catch (e) {
  console.error(`eval.mjs: ${e.message}\n${usage}`);
  process.exit(2);
}
if (args.help || args.model === null) {
  (args.help ? console.log : console.error)(usage);
  process.exit(args.help ? 0 : 2);
}

// A fixed prompt of ids every synthetic vocabulary has (BOS, byte tokens, word pieces).
const prompt = [1, 72, 104, 300, 301, 302, 260, 400];

try {
  const initStart = performance.now();
  const llama = await getLlama({
    build: "never",
    gpu: false,
    usePrebuiltBinaries: true,
    logLevel: LlamaLogLevel.error,
    progressLogs: false,
  });
  const initMs = performance.now() - initStart;
  const start = performance.now();
  const model = await llama.loadModel({modelPath: args.model, useMmap: args.useMmap, gpuLayers: 0});
  const context = await model.createContext({
    contextSize: 64,
    batchSize: 64,
    threads: args.threads,
    sequences: 1,
  });
  const loadMs = performance.now() - start;
  const sequence = context.getSequence();
  const steps = [];
  let firstTokenMs = null;
  for await (const out of sequence.evaluateWithMetadata(prompt, {probabilities: true},
                                                         {temperature: 0})) {
    if (firstTokenMs === null) firstTokenMs = performance.now() - start;
    const top = [...out.probabilities.entries()]
        .sort((a, b) => b[1] - a[1] || a[0] - b[0])
        .slice(0, args.top);
    steps.push({token: out.token, probabilities: top});
    if (steps.length >= args.steps) break;
  }
  console.log(JSON.stringify({
    model: args.model,
    use_mmap: args.useMmap,
    init_ms: Math.round(initMs),
    load_ms: Math.round(loadMs),
    first_token_ms: Math.round(firstTokenMs),
    prompt,
    tokens: steps.map((s) => s.token),
    steps,
  }));
  await context.dispose();
  await model.dispose();
  await llama.dispose();
} catch (e) {
  console.error(`eval.mjs: ${args.model}: ${e.stack || e}`);
  process.exit(1);
}
