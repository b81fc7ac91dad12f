// npm run bench [-- <scenario>…]: tollgate and its peers (the upstream direct, a bare uWS app, nginx) in one
// run on 127.0.0.1, each measured by autocannon, every figure also a ratio to the upstream called directly.
// `npm run bench -- soak` runs the 60 s soak, `-- recover` the signature-recovery micro-benchmark,
// `-- history [--rows N] [--ci]` reads, jobs and the paid path on a seeded history (bench/scenarios/history.ts).
// Real parts only (anvil, PostgreSQL server when BENCH_DATABASE_URL is set, else PGlite); all bounded.
import { execFileSync } from 'node:child_process'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { setFlagsFromString } from 'node:v8'
import { runInNewContext } from 'node:vm'
import { keccak256, toHex } from 'viem'
import { startDevChain } from '../src/chain/dev-chain.ts'
import { cpuMeter, postgresBackends, withChildren } from './cpu.ts'
import { makeProofs } from './proofs.ts'
import { readmeTable, writeReadmeTable } from './readme-table.ts'
import { measureRecovery } from './recover.ts'
import {
  featureCosts,
  formatChecks,
  formatFeatureCosts,
  machine,
  resultsName,
  type ScenarioResult,
  table,
  targetChecks,
  withRatio,
  writeResults,
} from './report.ts'
import type { Context, TollgateKind } from './scenarios/context.ts'
import { settings } from './scenarios/context.ts'
import { FEATURES } from './scenarios/features.ts'
import { runHistoryBench } from './scenarios/history.ts'
import { runHistoryRetentionBench } from './scenarios/history-retention.ts'
import { type Scenario, scenarios } from './scenarios/index.ts'
import { runSoak } from './scenarios/soak.ts'
import { runWebsocketSessions } from './scenarios/websocket-sessions.ts'
import { runX402Capacity } from './scenarios/x402-capacity.ts'
import { runX402Facilitator } from './scenarios/x402-facilitator.ts'
import { BENCH_AGENT, BENCH_SIGNER, startAgentDirectory } from './targets/agent-directory.ts'
import { startBareRelay } from './targets/bare-relay.ts'
import { startBareUws } from './targets/bare-uws.ts'
import { startMppReference } from './targets/mpp-reference.ts'
import { findNginx, startNginx } from './targets/nginx.ts'
import { ROOT } from './targets/processes.ts'
import { waitQuiet } from './targets/quiet.ts'
import { startTollgate } from './targets/tollgate.ts'
import { startUpstream } from './targets/upstream.ts'
import { startX402Reference } from './targets/x402-reference.ts'

// A full run takes ~13 minutes on a quick machine; on a slow one the x402 and upto settlements left by a
// scenario keep the instances busy for up to a minute before the next (each wait is capped at 60 s), and a
// run of 2026-11-27 reached 15 minutes at the 23rd of 30 scenarios. The feature runs (each warmed up first)
// added about as many paid runs again.
const HARD_LIMIT_MS = 40 * 60_000

const HELP = `usage: npm run bench [-- <scenario>… | soak | recover | history [options] | --readme [--write] [file]]

  (no argument)      every scenario, then the 60 s soak; writes bench/results/<date>-full.json
  <scenario>…        those scenarios (plus direct); writes bench/results/<date>-partial-<names>.json
  soak               the 60 s soak alone, on an instance of its own
  recover            EIP-3009 recoveries and treasury signatures per CPU second
  history [--rows N] [--ci] [--keep] [--reseed] [--calls-per-batch N]
                     reads, jobs and the paid path on a seeded history (PostgreSQL server)
  history-retention [--rate 10000] [--seconds 90] [--month-seconds 15]
                     table sizes while SQL intake at that rate runs beside retention and archiving
  x402-capacity [--rates 100,250,…] [--seconds 8] [--modes before_answer,after] [--workers2-modes before_answer,after] [--no-workers2]
                [--report file]
                     x402 settled before the answer vs after, paced steps on a 2 s block chain, each mode on a
                     fresh instance; --report derives a committed run's capacities again from its steps
  x402-facilitator [--rates 50,100,…] [--reference-rates 5,10,…] [--seconds 6] [--payers 8] [--out file]
                     verify+settle per second: tollgate's facilitator vs the reference's, 2 s blocks
  websocket-sessions [--sessions 500] [--seconds 10] [--ask-ms 1000] [--words 20] [--vouchers 200] [--workers 1]
                     [--runtime built|tsx] [--out file]
                     N paid sessions held open (RSS each), messages/s and CPU per message against a bare
                     uWS WebSocket relay, the voucher top-up round trip p99 (target run: --sessions 10000)
  --readme [file]    the README's table from the newest full run (or file); --write puts it in README.md

scenarios: ${scenarios.map((s) => s.name).join(', ')}
environment: BENCH_DATABASE_URL, BENCH_CONNECTIONS (32), BENCH_DURATION_S (5), BENCH_PROOFS, BENCH_TRACING, BENCH_NODE_FLAGS,
  BENCH_PROFILE_DIR, BENCH_CHILD_LOG (prefix: each started process's output after it is ready goes
  to <prefix>-<pid>.log), BENCH_LABEL (names the results file <date>-<label>.json, e.g. x402-before-<commit>),
  BENCH_X402 / BENCH_UPTO / BENCH_MPP (1500 measured calls), BENCH_X402_WARM_UP (300 paid before each, unmeasured; 0: none),
  BENCH_PG_STATEMENTS=1 (x402-capacity, x402-facilitator: each step's costliest statements per call, from pg_stat_statements on a
  BENCH_DATABASE_URL server that preloads it; track = all shows those inside functions)
`

async function main() {
  const args = process.argv.slice(2)
  if (args.includes('--help') || args.includes('-h')) {
    process.stdout.write(HELP)
    return
  }
  if (args[0] === '--readme') {
    const rest = args.slice(1).filter((a) => a !== '--write')
    const dir = join(ROOT, 'bench', 'results')
    if (args.includes('--write'))
      process.stdout.write(`README.md: ${writeReadmeTable(join(ROOT, 'README.md'), dir, rest[0])}\n`)
    else process.stdout.write(`${readmeTable(dir, rest[0])}\n`)
    return
  }
  if (args[0] === 'recover') {
    process.stdout.write(`${JSON.stringify(await measureRecovery())}\n`)
    return
  }
  if (args[0] === 'history') return runHistoryBench(args.slice(1))
  if (args[0] === 'history-retention') return runHistoryRetentionBench(args.slice(1))
  if (args[0] === 'x402-capacity') return runX402Capacity(args.slice(1))
  if (args[0] === 'x402-facilitator') return runX402Facilitator(args.slice(1))
  if (args[0] === 'websocket-sessions') return runWebsocketSessions(args.slice(1))
  const soakOnly = args[0] === 'soak'
  // The full run ends with the 60 s soak; `-- soak` runs it alone.
  const withSoak = soakOnly || args.length === 0 || args[0] === 'all'
  let chosen: Scenario[]
  try {
    chosen = soakOnly ? [] : select(args)
  } catch (err) {
    // A usage error, not a failure of the run: one line and exit 2, nothing started.
    process.stderr.write(`bench: ${(err as Error).message}\n`)
    process.exitCode = 2
    return
  }
  // A full run is the one committed and read against nginx (the README's table, the targets): without nginx
  // it would be written whole but for its peer (a fresh machine's first try on 2026-12-01 was). Refused before
  // anything starts; a partial run of named scenarios still skips the nginx ones.
  if (withSoak && !soakOnly && findNginx() === null) {
    process.stderr.write(
      'bench: a full run compares with nginx, which is not installed: apt-get install -y nginx-light (or name scenarios for a partial run)\n',
    )
    process.exitCode = 2
    return
  }
  const hardStop = setTimeout(() => {
    process.stderr.write('bench: hard time limit reached\n')
    process.exit(2)
  }, HARD_LIMIT_MS)
  hardStop.unref()
  // The built JavaScript is what production runs (npm start); build it when src/ changed since.
  execFileSync(process.execPath, [join(ROOT, 'scripts', 'build.mjs'), '--if-stale'], { stdio: 'inherit' })
  const dir = mkdtempSync(join(tmpdir(), 'tollgate-bench-'))
  // Base Sepolia's chain id and name, so the published x402 client (which knows no private chain) can pay.
  const chain = await startDevChain({ chainId: 84532, payers: 1, payerFunding: 100_000_000_000n })
  const kinds = chosen.flatMap((s) => s.tollgates ?? [])
  const ctx = await startTargets(dir, chain, kinds, chosen)
  try {
    const proofCount = chosen.reduce((n, s) => n + (s.proofs ?? 0), 0)
    if (proofCount) await prepareProofs(ctx, proofCount)
    const results = chosen.length ? await runScenarios(ctx, chosen) : []
    if (withSoak) {
      // Its own instance, started now: the soak measures growth under steady load, not the heap the earlier
      // scenarios left in the warm instance (one major GC of that once moved RSS 40 % down mid-soak).
      ctx.tollgates.soak = await startKind(ctx, 'soak')
      process.stdout.write(
        `bench: soak (instances quiet after ${await waitQuiet(backgroundPids(ctx), { maxTicksPerS: quietTicksPerS(ctx), maxMs: 60_000 })} ms)\n`,
      )
    }
    const soak = withSoak ? await runSoak(ctx) : null
    if (soak) results.push(...soak.scenarios)
    const recovery = soakOnly ? null : await measureRecovery(500)
    const targets = targetChecks(results, soak?.soak)
    const features = featureCosts(results, FEATURES)
    process.stdout.write(
      `\n${table(results)}\n\n${formatChecks(targets)}\n${formatFeatureCosts(features)}${recovery ? `EIP-3009 recoveries per CPU second (one core): ${JSON.stringify(recovery)}\n` : ''}`,
    )
    const name = resultsName(new Date(), {
      full: args.length === 0 || args[0] === 'all',
      label: process.env.BENCH_LABEL,
      scenarios: soakOnly ? ['soak'] : chosen.map((s) => s.name),
    })
    const file = writeResults(
      join(ROOT, 'bench', 'results'),
      machine(meta()),
      results,
      {
        targets,
        ...(features.length ? { features } : {}),
        ...(recovery ? { recovery } : {}),
        ...(soak ? { soak: soak.soak } : {}),
      },
      name,
    )
    process.stdout.write(`results: ${file}\n`)
  } finally {
    for (const t of [
      ...Object.values(ctx.tollgates),
      ctx.nginx,
      ctx.bare,
      ctx.relay,
      ctx.x402Reference,
      ctx.mppReference,
      ctx.upstream,
    ])
      await t?.stop()
    await chain.stop()
    rmSync(dir, { recursive: true, force: true })
  }
}

/** The named scenarios (all when none), always with `direct` first: every ratio needs it. */
function select(names: string[]): Scenario[] {
  if (names.length === 0 || names[0] === 'all') return scenarios
  const unknown = names.filter((n) => !scenarios.some((s) => s.name === n))
  if (unknown.length) {
    throw new Error(
      `unknown scenario ${unknown.join(', ')}; known: ${scenarios.map((s) => s.name).join(', ')}, soak, recover, history (npm run bench -- --help)`,
    )
  }
  return scenarios.filter((s) => s.name === 'direct' || names.includes(s.name))
}

function meta(): Record<string, unknown> {
  return {
    connections: settings.connections,
    duration_s: settings.durationS,
    database: process.env.BENCH_DATABASE_URL ? 'postgresql server' : 'embedded pglite',
    load_generator: 'autocannon 9 (in the bench process), latencies into an HDR histogram',
    command: `npm run bench${process.argv.length > 2 ? ` -- ${process.argv.slice(2).join(' ')}` : ''}`,
  }
}

/** The feature-receipts instance's signing key: keccak256("tollgate bench receipt key"), public on purpose. */
const BENCH_RECEIPT_KEY = keccak256(toHex('tollgate bench receipt key'))

/** A tollgate instance of one kind, on the bench's chain and upstream. */
function startKind(ctx: Context, kind: TollgateKind) {
  return startTollgate({
    name: kind,
    dir: ctx.dir,
    chain: {
      rpcUrl: ctx.chain.rpcUrl,
      usdcAddress: ctx.chain.usdcAddress,
      treasuryKey: ctx.chain.treasury.privateKey,
      payer: ctx.chain.payers[0]!.address,
    },
    upstream: ctx.upstream.base,
    watch: kind !== 'cold',
    runtime: kind === 'tsx' ? 'tsx' : 'built',
    workers: kind === 'workers2' ? 2 : 1,
    profileDir: kind === 'warm' || kind === 'receipts' ? process.env.BENCH_PROFILE_DIR : undefined,
    receiptKey: kind === 'receipts' ? BENCH_RECEIPT_KEY : undefined,
    rateLimits: kind === 'limited',
    identity:
      kind === 'warm' && ctx.agent !== null
        ? {
            directories: [{ name: BENCH_SIGNER, signature_agent: BENCH_AGENT, url: ctx.agent.url }],
            allow_private_directories: true,
          }
        : undefined,
  })
}

async function startTargets(
  dir: string,
  chain: Context['chain'],
  kinds: TollgateKind[],
  chosen: Scenario[],
): Promise<Context> {
  const upstream = await startUpstream(HARD_LIMIT_MS)
  const proofs: string[] = []
  const ctx: Context = {
    proofPool: proofs,
    dir,
    chain,
    upstream,
    bare: null,
    relay: null,
    nginx: null,
    x402Reference: null,
    mppReference: null,
    tollgates: {},
    agent: chosen.some((s) => s.name.startsWith('signed-agent')) ? await startAgentDirectory() : null,
    rps: new Map(),
    takeProofs: (n) => {
      if (proofs.length < n) throw new Error(`out of proofs: ${n} asked, ${proofs.length} left`)
      return proofs.splice(0, n)
    },
  }
  // One at a time: two cores, and each start-up is CPU-heavy (migrations, JIT).
  for (const kind of new Set(kinds)) ctx.tollgates[kind] = await startKind(ctx, kind)
  if (chosen.some((s) => s.peer === 'nginx')) {
    ctx.nginx = await startNginx({ dir, upstream: upstream.base, workers: 1 })
    if (!ctx.nginx) process.stdout.write('bench: nginx not found; the nginx scenario is skipped\n')
  }
  if (chosen.some((s) => s.peer === 'bare-relay')) {
    ctx.relay = await startBareRelay({
      upstream: upstream.base,
      maxMs: HARD_LIMIT_MS,
      profileDir: process.env.BENCH_PROFILE_DIR,
    })
  }
  if (chosen.some((s) => s.peer === 'x402-reference')) {
    ctx.x402Reference = await startX402Reference({ chain, upstream: upstream.base, maxMs: HARD_LIMIT_MS })
  }
  if (chosen.some((s) => s.peer === 'mpp-reference')) {
    ctx.mppReference = await startMppReference({ chain, upstream: upstream.base, maxMs: HARD_LIMIT_MS })
  }
  if (chosen.some((s) => s.peer === 'bare-uws')) {
    ctx.bare = await startBareUws({
      dir,
      challengeUrl: await ctx.tollgates.warm!.metered('/data'),
      maxMs: HARD_LIMIT_MS,
    })
  }
  return ctx
}

async function prepareProofs(ctx: Context, count: number): Promise<void> {
  const started = performance.now()
  process.stdout.write(`bench: making ${count} payment proofs (USDC transfers) on anvil…\n`)
  const hashes = await makeProofs({
    rpcUrl: ctx.chain.rpcUrl,
    chainId: ctx.chain.chainId,
    usdc: ctx.chain.usdcAddress,
    payerKey: ctx.chain.payers[0]!.privateKey,
    treasury: ctx.chain.treasury.address,
    value: 1_000n,
    count,
  })
  // One at a time: a spread of 133,000 arguments (a full run with the feature runs) overflows the stack.
  for (const h of hashes) ctx.proofPool.push(h)
  process.stdout.write(`bench: ${count} proofs in ${Math.round(performance.now() - started)} ms\n`)
  // The warm instances' watchers fill their verified-transfer caches ("pre-verified" proofs); wait until
  // they are done parsing, or that work would load the first scenarios.
  await new Promise((r) => setTimeout(r, 1_000))
  const pids = Object.values(ctx.tollgates).flatMap((t) => (t.pid ? [t.pid] : []))
  process.stdout.write(`bench: instances quiet after ${await waitQuiet(pids)} ms\n`)
}

async function runScenarios(ctx: Context, chosen: Scenario[]): Promise<ScenarioResult[]> {
  // Warm each tollgate's endpoint cache and JIT on the unpaid path first.
  for (const t of Object.values(ctx.tollgates)) {
    const url = await t.metered('/data')
    for (let i = 0; i < 200; i++) await fetch(url).then((r) => r.arrayBuffer())
  }
  const results: ScenarioResult[] = []
  for (const s of chosen) {
    if (s.warmUp) {
      process.stdout.write(`bench: ${s.name}: warm-up run (not measured)\n`)
      await s.warmUp(ctx)
    }
    if (s.prepare) {
      process.stdout.write(`bench: ${s.name}: preparing (not measured)\n`)
      await s.prepare(ctx)
    }
    // What a scenario leaves behind (x402 settlements, payout batches, the watcher's parsing) must not load
    // the next one (measured: the upstream-only half-load run, after the x402 one, was charged 56 µs of this
    // run's PostgreSQL CPU per request, which only the settlements still draining could have used).
    const quietMs = await settle(ctx)
    process.stdout.write(`bench: ${s.name}… (instances quiet after ${quietMs} ms)\n`)
    const meter = cpuMeter(cpuGroups(ctx, s))
    const ran = await s.run(ctx)
    if ('skipped' in ran) {
      process.stdout.write(`bench: ${s.name} skipped: ${ran.skipped}\n`)
      continue
    }
    const { afterLoad, ...m } = ran
    ctx.rps.set(s.name, m.rps)
    const r = {
      ...withRatio(s.name, m, ctx.rps.get('direct') ?? null),
      cpu_us_per_req: meter.stop(m.requests),
      quiet_wait_ms: quietMs,
      ...(afterLoad ? await afterLoad() : {}),
    }
    const cpu = Object.entries(r.cpu_us_per_req)
      .map(([k, v]) => `${k} ${v}`)
      .join(', ')
    process.stdout.write(
      `  ${r.rps} req/s  p50 ${r.p50_ms} ms  p99 ${r.p99_ms} ms (${r.p99_us} µs)  errors ${r.errors}${r.wrong_status ? ` ${JSON.stringify(r.wrong_status)}` : ''}${r.no_answer ? ` no answer ${JSON.stringify(r.no_answer)}` : ''}  ratio ${r.ratio_to_direct}  load generator ${r.loadgen_cpu_pct} % CPU  machine ${r.machine_cpu_pct} % busy  CPU µs/request: ${cpu}${r.rpc_per_proof === undefined ? '' : `  rpc/proof ${r.rpc_per_proof} (calls ${r.rpc_calls_per_proof})`}${r.ratio_to_nginx === undefined ? '' : `  ×nginx ${r.ratio_to_nginx}  ×x402 ${r.ratio_to_x402}`}${r.ratio_to_mpp_reference === undefined ? '' : `  ×x402 ${r.ratio_to_x402}  ×x402-after ${r.ratio_to_x402_after}  ×mpp-reference ${r.ratio_to_mpp_reference}`}${r.inside ? `\n  inside: ${JSON.stringify(r.inside)}` : ''}${r.settlement ? `\n  settlement: ${JSON.stringify(r.settlement)}` : ''}${r.claims ? `\n  claims: ${JSON.stringify(r.claims)}` : ''}\n`,
    )
    results.push(r)
  }
  return results
}

/**
 * Between scenarios: the instances' databases vacuumed (server), then a wait until the instances and their
 * databases are quiet. Returns the milliseconds it took.
 */
async function settle(ctx: Context): Promise<number> {
  const started = Date.now()
  await Promise.all(Object.values(ctx.tollgates).map((t) => t?.maintain()))
  await waitQuiet(backgroundPids(ctx), { maxTicksPerS: quietTicksPerS(ctx), maxMs: 60_000 })
  // The load generator runs in this process: a major GC of the last scenario's garbage (256 KB bodies, x402
  // payloads) would stall it mid-run, and an open-loop run counts that stall against the target (seen: the
  // upstream alone at half load read p99 386 ms in a full run, 8 ms when run alone).
  collectGarbage()
  return Date.now() - started
}

const collectGarbage: () => void = (() => {
  setFlagsFromString('--expose-gc')
  return runInNewContext('gc') as () => void
})()

/**
 * Quiet: 10 CPU ticks a second (a tenth of a core) for everything, plus 4 for each running tollgate instance:
 * an idle instance's own timers (its jobs, the chain watcher's polls, metrics) cost 1 to 4 ticks a second,
 * so with six instances a fixed 10 was never reached and every scenario waited the 60 s maximum.
 */
function quietTicksPerS(ctx: Context): number {
  return 10 + 4 * Object.values(ctx.tollgates).filter((t) => t?.pid).length
}

/** The processes whose background work could load the next scenario: tollgate instances and their databases. */
function backgroundPids(ctx: Context): number[] {
  const tollgates = Object.values(ctx.tollgates).flatMap((t) => (t?.pid ? [t.pid] : []))
  return process.env.BENCH_DATABASE_URL ? [...tollgates, ...postgresBackends(`_${process.pid}`)] : tollgates
}

/**
 * Whose CPU a scenario's requests cost: the proxy under test (tollgate with its workers and, on the embedded
 * database, PGlite; or the peer), the upstream, and the PostgreSQL server's backends of this run's databases
 * when a server is used (bench/targets/tollgate.ts names them tollgate_bench_<kind>_<bench pid>).
 */
function cpuGroups(ctx: Context, s: Scenario): Record<string, () => number[]> {
  const peer =
    s.peer === 'nginx'
      ? ctx.nginx
      : s.peer === 'x402-reference'
        ? ctx.x402Reference
        : s.peer === 'mpp-reference'
          ? ctx.mppReference
          : s.peer === 'bare-relay'
            ? ctx.relay
            : null
  const proxies =
    s.peer === 'bare-uws' ? [ctx.bare] : peer ? [peer] : (s.tollgates ?? []).map((k) => ctx.tollgates[k])
  const pidsOf = (ts: ({ pid: number | null } | null | undefined)[]) =>
    ts.flatMap((t) => (t?.pid ? [t.pid] : []))
  const groups: Record<string, () => number[]> = {
    proxy: () => withChildren(pidsOf(proxies)),
    upstream: () => withChildren(pidsOf([ctx.upstream])),
    // anvil: the chain reads of cold proofs and x402 verifications, settlement transactions and their blocks.
    chain: () => [ctx.chain.pid],
  }
  if (process.env.BENCH_DATABASE_URL) groups.database = () => postgresBackends(`_${process.pid}`)
  return groups
}

// Ctrl-C / SIGTERM still stops the children (their 'exit' hooks kill them by PID).
for (const signal of ['SIGINT', 'SIGTERM'] as const) process.once(signal, () => process.exit(130))

main().catch((err) => {
  process.stderr.write(`bench failed: ${err?.stack ?? err}\n`)
  process.exit(1)
})
