// Model state through llama.cpp (node-llama-cpp's prebuilt CPU binaries): primes a sequence
// with a fixed prompt and saves its state, or continues greedy decoding after priming the same
// prompt either from scratch or by loading a saved state. Prints one JSON line.
//
//   node state.mjs prime MODEL --out FILE [--prompt-tokens N] [--threads N]
//     {"prime_ms", "tokens_primed", "state_bytes"}: evaluates the prompt's first N-1 tokens
//     and saves the sequence's state (its KV cache) to FILE.
//   node state.mjs continue MODEL [--state FILE] [--prompt-tokens N] [--steps K] [--threads N]
//     {"primed_by": "scratch"|"state", "prime_ms", "tokens", "steps": [{"token",
//      "probabilities": [[id, p]...]}]}: primes the first N-1 tokens (evaluating them, or
//     loading FILE), then evaluates the last prompt token and K-1 more greedy steps.
// prime_ms is what priming cost: the prompt's evaluation, or the state file's load. The
// probabilities are llama.cpp's floats, unrounded, so two runs compare exactly.
import {getLlama, LlamaLogLevel} from "node-llama-cpp";

const usage = "usage: node state.mjs prime MODEL --out FILE [--prompt-tokens N] [--threads N]\n" +
    "       node state.mjs continue MODEL [--state FILE] [--prompt-tokens N] [--steps K] " +
    "[--threads N]";

function parseArgs(argv) {
  const args = {mode: null, model: null, out: null, state: null, promptTokens: 400, steps: 4,
                threads: 2, top: 8};
  for (let i = 0; i < argv.length; ++i) {
    const a = argv[i];
    if (a === "--out") args.out = argv[++i];
    else if (a === "--state") args.state = argv[++i];
    else if (a === "--prompt-tokens") args.promptTokens = Number(argv[++i]);
    else if (a === "--steps") args.steps = Number(argv[++i]);
    else if (a === "--threads") args.threads = Number(argv[++i]);
    else if (a === "--help" || a === "-h") args.help = true;
    else if (args.mode === null) args.mode = a;
    else if (args.model === null) args.model = a;
    else throw new Error(`unexpected argument '${a}'`);
  }
  if (!args.help) {
    if (args.mode !== "prime" && args.mode !== "continue") throw new Error("mode: prime or continue");
    if (args.model === null) throw new Error("MODEL is required");
    if (args.mode === "prime" && args.out === null) throw new Error("prime needs --out FILE");
    if (!(args.promptTokens >= 2)) throw new Error("--prompt-tokens must be at least 2");
  }
  return args;
}

let args;
try {
  args = parseArgs(process.argv.slice(2));
} catch (e) {
  console.error(`state.mjs: ${e.message}\n${usage}`);
  process.exit(2);
}
if (args.help) {
  console.log(usage);
  process.exit(0);
}

// A fixed prompt every synthetic vocabulary (at least 512 ids) has: BOS, then word pieces.
const prompt = [1];
for (let i = 1; i < args.promptTokens; ++i) prompt.push(260 + ((i * 37) % 240));
const prefix = prompt.slice(0, -1);
const last = prompt[prompt.length - 1];

try {
  const llama = await getLlama({
    build: "never",
    gpu: false,
    usePrebuiltBinaries: true,
    logLevel: LlamaLogLevel.error,
    progressLogs: false,
  });
  const model = await llama.loadModel({modelPath: args.model, gpuLayers: 0});
  const context = await model.createContext({
    contextSize: Math.max(64, args.promptTokens + args.steps + 8),
    batchSize: 512,
    threads: args.threads,
    sequences: 1,
  });
  const sequence = context.getSequence();
  const start = performance.now();
  if (args.mode === "continue" && args.state !== null) {
    await sequence.loadStateFromFile(args.state, {acceptRisk: true});
  } else {
    await sequence.evaluateWithoutGeneratingNewTokens(prefix);
  }
  const primeMs = performance.now() - start;
  if (sequence.contextTokens.length !== prefix.length ||
      sequence.contextTokens.some((t, i) => t !== prefix[i])) {
    throw new Error(`after priming the sequence holds ${sequence.contextTokens.length} tokens, ` +
                    `not the ${prefix.length} of the prompt`);
  }
  if (args.mode === "prime") {
    const {fileSize} = await sequence.saveStateToFile(args.out);
    console.log(JSON.stringify({prime_ms: Math.round(primeMs), tokens_primed: prefix.length,
                                state_bytes: fileSize}));
  } else {
    const steps = [];
    for await (const out of sequence.evaluateWithMetadata([last], {probabilities: true},
                                                           {temperature: 0})) {
      const top = [...out.probabilities.entries()]
          .sort((a, b) => b[1] - a[1] || a[0] - b[0])
          .slice(0, args.top);
      steps.push({token: out.token, probabilities: top});
      if (steps.length >= args.steps) break;
    }
    console.log(JSON.stringify({
      primed_by: args.state !== null ? "state" : "scratch",
      prime_ms: Math.round(primeMs * 10) / 10,
      tokens_primed: prefix.length,
      tokens: steps.map((s) => s.token),
      steps,
    }));
  }
  await context.dispose();
  await model.dispose();
  await llama.dispose();
} catch (e) {
  console.error(`state.mjs: ${args.model}: ${e.stack || e}`);
  process.exit(1);
}
