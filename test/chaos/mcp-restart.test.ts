// Paid MCP tools/call under PostgreSQL crash-restarts: the published MCP SDK server (stateless: `echo` free,
// `weather` at a fixed price, `report` priced by its answer's bytes) counting each execution by the caller's
// `ref`, two tollgate server processes on a private PostgreSQL server (base-sepolia terms on a private anvil),
// and paid calls through both: transaction-hash proofs sent over HTTP (x-payment, the HTTP 402 flow) for
// weather and report, and x402 `exact` payments signed by the published x402 client sent in-band
// (params._meta["x402/payment"], the x402 MCP transport) for weather; unpaid calls and free calls beside them.
// PostgreSQL is crash-restarted (immediate stop: no clean shutdown) twice under the load; clients retry 503,
// 409, 5xx and network errors on the other instance. Judged afterwards: each paid call executed at most once
// per proof and never unpaid, each charged its tool's price to the base unit (report: the bytes its client
// received), every proof and in-band payment replayed on both instances refused, `npm run reconcile` exit 0,
// running balances equal to their entries.
import { existsSync } from 'node:fs'
import { x402Client } from '@x402/core/client'
import { decodePaymentRequiredHeader } from '@x402/core/http'
import type { PaymentPayload, PaymentRequired } from '@x402/core/types'
import { registerExactEvmScheme } from '@x402/evm/exact/client'
import postgres from 'postgres'
import type { Hex } from 'viem'
import { privateKeyToAccount } from 'viem/accounts'
import { describe, expect, it } from 'vitest'
import { makeProofs } from '../../bench/proofs.ts'
import type { DevChain } from '../../src/chain/dev-chain.ts'
import { startTestChain } from '../helpers/anvil.ts'
import type { ChildService } from '../helpers/child-service.ts'
import { waitFor } from '../helpers/wait-for.ts'
import { type CountingMcpServer, startCountingMcpServer } from './counting-mcp-server.ts'
import { balancesAgainstEntries, merchantEndpoint, runReconcile, startChildOn } from './harness.ts'
import { type PgCluster, startPgCluster } from './pg-cluster.ts'

const BASE_SEPOLIA_USDC = '0x036CbD53842c5426634e7929541eC2318f3dCF7e'
const WEATHER_ATOMIC = 2_000n
const REPORT_CEILING_ATOMIC = 3_000n
const OWNER_SHARE_BPS = 9_500n
const MCP = {
  tools: {
    weather: 0.002,
    // $1 per MB: one base unit per byte of the answer as delivered, at most the ceiling.
    report: { model: 'usage', unit: 'response_bytes', max_price: 0.003, price_per_mb: 1 },
  },
  default_price: 0.001,
  free_tools: ['echo'],
}
const COUNTS = { txWeather: 36, txReport: 18, inBand: 24, unpaid: 8, free: 8 }
/** The load is paced over this long; the restarts land inside it. */
const SPREAD_MS = 12_000
const CONCURRENCY = 6
/** A client gives up on an attempt after this long, and on its call after DEADLINE_MS. */
const ATTEMPT_TIMEOUT_MS = 8_000
const DEADLINE_MS = 40_000

type Kind = 'tx-weather' | 'tx-report' | 'in-band' | 'unpaid' | 'free'

interface Task {
  kind: Kind
  tool: 'weather' | 'report' | 'echo'
  ref: string
  sse: boolean
  hash: Hex | null
  /** The in-band payment, signed at its first attempt (then sent again unchanged on every retry). */
  payload: PaymentPayload | null
  payer: number
  proofKey: string | null
  done: 'served' | 'refused' | 'gave_up' | null
  /** Why it was refused (402 error / in-band error). */
  reason: string | null
  /** Body bytes of the served answer, as the client received them. */
  bytes: number
  /** Each attempt: instance, outcome, ms into the load; then the replays. */
  trail: string[]
}

interface Answer {
  status: number
  text: string
  bytes: number
}

interface Figures {
  paidCalls: number
  served: number
  refused: number
  gaveUp: number
  attempts: number
  retried503: number
  retried409: number
  networkErrors: number
  /** Answers no client can act on (a 4xx other than 402/409, a tool error): each one fails the run. */
  unexpected: string[]
  /** Paid calls whose tool the server executed more than once for one proof. */
  executedTwice: number
  /** Paid tool executions with no call row charging their proof, and unpaid calls executed at all. */
  executedUnpaid: number
  /** Served proofs whose call row is missing, duplicated, of another tool, or charged another amount. */
  chargeMismatch: number
  /** Call rows whose owner share is not floor(charge × 95 %) (booked ones). */
  ownerShareMismatch: number
  /** Usage calls whose refund is not ceiling − charge. */
  refundMismatch: number
  chargedAtomic: bigint
  replays: number
  /** Replays answered with anything but a refusal, and executions the replays caused. */
  replayNotRefused: number
  replayExecuted: number
  restarts: number
  restartMs: number[]
  reconcileExit: number | null
  balancesChecked: number
  balanceDrift: number
  settledPending: number
  /** Log lines of the instances saying claims written without an answer were released for a retry. */
  unansweredReleasedLogs: number
  totalMs: number
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))

describe.runIf(existsSync('/usr/lib/postgresql'))('MCP tools/call under PostgreSQL crash-restarts', () => {
  it('two instances, HTTP 402 and in-band payments: once per proof, never unpaid, exact charges, replays refused', async () => {
    const lines: string[] = []
    const { figures, tasks } = await runMcpChaos((line) => lines.push(line))
    const table = Object.entries(figures)
      .map(([k, v]) => `  ${k.padEnd(20)} ${Array.isArray(v) ? v.join(', ') : String(v)}`)
      .join('\n')
    process.stdout.write(`\nMCP chaos:\n${table}\n`)
    const suspects = tasks
      .filter((t) => t.done !== 'served' && t.kind !== 'unpaid')
      .map((t) => `${t.kind} ${t.ref} ${t.done} ${t.reason ?? ''}: ${t.trail.join(' ')}`)
    const context = `${lines.join('\n')}\n${table}\n${suspects.join('\n')}`
    expect(figures.restarts, context).toBe(2)
    expect(figures.unexpected, context).toEqual([])
    expect(figures.executedTwice, context).toBe(0)
    expect(figures.executedUnpaid, context).toBe(0)
    expect(figures.chargeMismatch, context).toBe(0)
    expect(figures.ownerShareMismatch, context).toBe(0)
    expect(figures.refundMismatch, context).toBe(0)
    expect(figures.replayNotRefused, context).toBe(0)
    expect(figures.replayExecuted, context).toBe(0)
    expect(figures.reconcileExit, context).toBe(0)
    expect(figures.balancesChecked, context).toBeGreaterThan(0)
    expect(figures.balanceDrift, context).toBe(0)
    // Every paid call ended served: a restart is ridden out, not passed on to the payer as a refusal.
    expect(figures.gaveUp, context).toBe(0)
    expect(figures.served, context).toBe(figures.paidCalls)
    // The unpaid calls were refused with the tool's price, none executed.
    expect(
      tasks.filter((t) => t.kind === 'unpaid' && t.reason !== 'payment_required'),
      context,
    ).toEqual([])
    // The restarts landed under load: some call had to be retried past one.
    expect(figures.retried503 + figures.networkErrors + figures.retried409, context).toBeGreaterThan(0)
  })
})

async function runMcpChaos(log: (line: string) => void): Promise<{ figures: Figures; tasks: Task[] }> {
  const cleanups: Array<() => Promise<unknown>> = []
  const started = Date.now()
  try {
    const cluster: PgCluster = await startPgCluster()
    cleanups.push(() => cluster.destroy())
    // USDC at its base-sepolia address: the published x402 client pays only the networks' default assets.
    const chain: DevChain = await startTestChain({ chainId: 84532, usdcAt: BASE_SEPOLIA_USDC })
    cleanups.push(() => chain.stop())
    const server: CountingMcpServer = await startCountingMcpServer()
    cleanups.push(() => server.close())
    const settings = {
      proxy: { allow_private_upstreams: true, upstream_timeout_ms: 3_000 },
      chain: { poll_interval_ms: 200, rpc_timeout_ms: 2_000 },
      settlement: { interval_ms: 300, receipt_poll_ms: 100 },
      log: { level: 'warn' },
    }
    const start = () => startChildOn(cluster, chain, settings, { NETWORK: 'base-sepolia' })
    // Together (migrations run once, under an advisory lock); a child that did start is stopped either way.
    const keep = (child: ChildService) => {
      cleanups.push(() => child.kill('SIGTERM'))
      return child
    }
    const [a, b] = (await Promise.all([start().then(keep), start().then(keep)])) as [
      ChildService,
      ChildService,
    ]
    const instances: Array<[string, ChildService]> = [
      ['a', a],
      ['b', b],
    ]
    log(`cluster ${cluster.url}; instances a ${a.url}, b ${b.url}; MCP server ${server.url}`)

    const { ep } = await merchantEndpoint(a.url, 'MCP chaos', {
      upstream_url: server.url,
      kind: 'mcp',
      mcp: MCP,
    })
    const endpointId = ep.id as string

    const proofs = async (value: bigint, count: number) =>
      makeProofs({
        rpcUrl: chain.rpcUrl,
        chainId: chain.chainId,
        usdc: chain.usdcAddress,
        payerKey: chain.payers[0]!.privateKey,
        treasury: chain.treasury.address,
        value,
        count,
      })
    const weatherHashes = await proofs(WEATHER_ATOMIC, COUNTS.txWeather)
    const reportHashes = await proofs(REPORT_CEILING_ATOMIC, COUNTS.txReport)
    // The 402 of the weather tool: what the in-band payments pay.
    const required = await paymentRequiredOf(a.url, endpointId)
    const clients = [2, 3, 4].map((i) => {
      const c = new x402Client()
      registerExactEvmScheme(c, { signer: privateKeyToAccount(chain.payers[i]!.privateKey) as never })
      return c
    })
    // Let both watchers see the transfers (a missed one is verified by RPC instead: a settle period, not a
    // condition).
    await sleep(2_000)

    const tasks: Task[] = []
    const add = (kind: Kind, tool: Task['tool'], hash: Hex | null, i: number) => {
      tasks.push({
        kind,
        tool,
        ref: `${kind}-${i}`,
        sse: i % 2 === 1,
        hash,
        payload: null,
        payer: i % clients.length,
        proofKey: hash === null ? null : `tx:${hash.toLowerCase()}`,
        done: null,
        reason: null,
        bytes: 0,
        trail: [],
      })
    }
    for (const [i, h] of weatherHashes.entries()) add('tx-weather', 'weather', h, i)
    for (const [i, h] of reportHashes.entries()) add('tx-report', 'report', h, i)
    for (let i = 0; i < COUNTS.inBand; i++) add('in-band', 'weather', null, i)
    for (let i = 0; i < COUNTS.unpaid; i++) add('unpaid', i % 2 === 0 ? 'weather' : 'report', null, i)
    for (let i = 0; i < COUNTS.free; i++) add('free', 'echo', null, i)
    // Interleaved, the same order every run.
    tasks.sort((x, y) => order(x) - order(y))

    const stats = { attempts: 0, s503: 0, s409: 0, network: 0, unexpected: [] as string[] }
    const restartMs: number[] = []
    const t0 = Date.now()
    const faults = (async () => {
      for (const at of [0.25, 0.6]) {
        const due = t0 + SPREAD_MS * at
        if (due > Date.now()) await sleep(due - Date.now())
        const t = Date.now()
        // Immediate: PostgreSQL is killed without a checkpoint and recovers from its WAL (a crash).
        await cluster.restart('immediate', 1_000)
        restartMs.push(Date.now() - t)
        log(`PostgreSQL crash-restarted at ${t - t0} ms, back after ${Date.now() - t} ms`)
      }
    })()
    const signPayment = async (task: Task) => {
      const payload = await clients[task.payer]!.createPaymentPayload(required)
      const auth = (payload.payload as { authorization: { from: string; nonce: string } }).authorization
      task.payload = payload
      task.proofKey = `auth:${chain.chainId}:${chain.usdcAddress.toLowerCase()}:${auth.from.toLowerCase()}:${auth.nonce.toLowerCase()}`
    }
    let next = 0
    const worker = async () => {
      for (;;) {
        const k = next++
        const task = tasks[k]
        if (!task) return
        const due = t0 + (k * SPREAD_MS) / tasks.length
        // Paced load: each call has its start time.
        if (due > Date.now()) await sleep(due - Date.now())
        if (task.kind === 'in-band') await signPayment(task)
        const deadline = Date.now() + DEADLINE_MS
        for (let attempt = 0; task.done === null; attempt++) {
          if (Date.now() > deadline) {
            task.done = 'gave_up'
            break
          }
          const [name, inst] = instances[(k + attempt) % instances.length]!
          stats.attempts++
          let answer: Answer
          try {
            answer = await call(inst.url, endpointId, task, k)
          } catch (err) {
            stats.network++
            const what = (err as Error).name === 'TimeoutError' ? 'timeout' : 'net'
            task.trail.push(`${name}:${what}@${Date.now() - t0}`)
            await sleep(150 + Math.random() * 150)
            continue
          }
          const outcome = classify(answer)
          task.trail.push(`${name}:${answer.status}/${outcome.reason ?? outcome.kind}@${Date.now() - t0}`)
          if (outcome.kind === 'served') {
            task.done = 'served'
            task.bytes = answer.bytes
          } else if (outcome.kind === 'refused') {
            task.done = 'refused'
            task.reason = outcome.reason
          } else if (outcome.kind === 'unexpected') {
            // Not an answer a client can act on: the call ends here, and the run fails on it.
            stats.unexpected.push(`${task.ref} ${name}: ${answer.status} ${answer.text.slice(0, 300)}`)
            task.done = 'gave_up'
          } else if (answer.status === 503) stats.s503++
          else if (answer.status === 409) stats.s409++
          // A retrying client's back-off, as agents do.
          if (task.done === null) await sleep(150 + Math.random() * 150)
        }
      }
    }
    await Promise.all([...Array.from({ length: CONCURRENCY }, worker), faults])
    log(`load done in ${Date.now() - t0} ms, ${stats.attempts} attempts`)

    const db = postgres(cluster.url, { max: 2, onnotice: () => {} })
    cleanups.push(() => db.end({ timeout: 1 }))
    const paid = tasks.filter((t) => t.proofKey !== null)
    const servedPaid = paid.filter((t) => t.done === 'served')
    // Captures are batched: wait until every served call has its row (bounded; a missing one is judged below).
    await waitFor(
      async () => {
        const [r] = await db<
          { n: number }[]
        >`SELECT count(*)::int AS n FROM calls WHERE endpoint_id = ${endpointId}`
        return r!.n >= servedPaid.length
      },
      { what: 'the captures of the served calls', timeoutMs: 20_000, intervalMs: 200 },
    ).catch((err) => log(`!! ${(err as Error).message}`))

    // Every proof and in-band payment once more on both instances: each must be refused, and run nothing.
    const executedBefore = new Map(server.executed)
    let replays = 0
    let replayNotRefused = 0
    next = 0
    const replayer = async () => {
      for (;;) {
        const task = paid[next++]
        if (!task) return
        for (const [name, inst] of instances) {
          replays++
          const answer = await call(inst.url, endpointId, task, 1_000_000 + replays).catch(() => null)
          const outcome = answer === null ? null : classify(answer)
          task.trail.push(`replay ${name}:${answer?.status ?? 'net'}/${outcome?.reason ?? outcome?.kind}`)
          if (outcome?.kind !== 'refused') replayNotRefused++
        }
      }
    }
    await Promise.all(Array.from({ length: CONCURRENCY }, replayer))
    // A fixed wait on purpose, for a negative: a replay that reached the server late is still counted.
    await sleep(1_000)
    let replayExecuted = 0
    for (const [key, n] of server.executed) replayExecuted += n - (executedBefore.get(key) ?? 0)

    // x402 payments settle on chain in batches (the leader's job): wait for them before the chain is
    // reconciled against the books.
    const pendingSettlement = async () => {
      const [r] = await db<{ n: number }[]>`
        SELECT count(*)::int AS n FROM claims
        WHERE kind = 'eip3009' AND status = 'captured' AND settled_at IS NULL`
      return r!.n
    }
    await waitFor(async () => (await pendingSettlement()) === 0, {
      what: 'the in-band payments settled',
      timeoutMs: 30_000,
      intervalMs: 200,
    }).catch((err) => log(`!! ${(err as Error).message}`))
    const settledPending = await pendingSettlement()

    const judged = await judge(db, tasks, server)
    const reconcileExit = await runReconcile(cluster.url, chain, log)
    const balances = await balancesAgainstEntries(cluster.url)
    const figures: Figures = {
      paidCalls: paid.length,
      served: servedPaid.length,
      refused: paid.filter((t) => t.done === 'refused').length,
      gaveUp: paid.filter((t) => t.done === 'gave_up').length,
      attempts: stats.attempts,
      retried503: stats.s503,
      retried409: stats.s409,
      networkErrors: stats.network,
      unexpected: stats.unexpected,
      ...judged,
      replays,
      replayNotRefused,
      replayExecuted,
      restarts: restartMs.length,
      restartMs,
      reconcileExit,
      balancesChecked: balances.checked,
      balanceDrift: balances.drifted,
      settledPending,
      unansweredReleasedLogs: [a, b]
        .map((c) => c.output().split('claims written without an answer were released').length - 1)
        .reduce((x, y) => x + y, 0),
      totalMs: Date.now() - started,
    }
    return { figures, tasks }
  } finally {
    for (const c of cleanups.splice(0).reverse()) await c().catch(() => {})
  }
}

/** Interleaves the kinds: the n-th of each kind lands near the n-th of the others. */
function order(t: Task): number {
  const i = Number(t.ref.slice(t.ref.lastIndexOf('-') + 1))
  const total: Record<Kind, number> = {
    'tx-weather': COUNTS.txWeather,
    'tx-report': COUNTS.txReport,
    'in-band': COUNTS.inBand,
    unpaid: COUNTS.unpaid,
    free: COUNTS.free,
  }
  return (i + 0.5) / total[t.kind]
}

/** One tools/call of the task's tool with its payment (a transaction hash in x-payment, or in-band). */
async function call(base: string, endpointId: string, task: Task, id: number): Promise<Answer> {
  const params: Record<string, unknown> = { name: task.tool, arguments: { ref: task.ref } }
  if (task.payload !== null) params._meta = { 'x402/payment': task.payload }
  const headers: Record<string, string> = {
    'content-type': 'application/json',
    accept: 'application/json, text/event-stream',
  }
  if (task.hash !== null) headers['x-payment'] = task.hash
  const res = await fetch(`${base}/m/${endpointId}${task.sse ? '?sse=1' : ''}`, {
    method: 'POST',
    headers,
    body: JSON.stringify({ jsonrpc: '2.0', id, method: 'tools/call', params }),
    signal: AbortSignal.timeout(ATTEMPT_TIMEOUT_MS),
  })
  const body = Buffer.from(await res.arrayBuffer())
  return { status: res.status, text: body.toString('utf8'), bytes: body.length }
}

async function paymentRequiredOf(base: string, endpointId: string): Promise<PaymentRequired> {
  const res = await fetch(`${base}/m/${endpointId}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
    body: JSON.stringify({
      jsonrpc: '2.0',
      id: 0,
      method: 'tools/call',
      params: { name: 'weather', arguments: { ref: 'probe' } },
    }),
  })
  const text = await res.text()
  if (res.status !== 402) throw new Error(`expected a 402, got ${res.status} ${text}`)
  return decodePaymentRequiredHeader(res.headers.get('payment-required')!)
}

type Outcome = { kind: 'served' | 'refused' | 'retry' | 'unexpected'; reason: string | null }

/**
 * What an answer means: served (a tool result), refused (HTTP 402, or a tool result carrying an x402
 * PaymentRequired: the in-band refusal), to be retried (503, 409, 5xx), or unexpected (anything else).
 */
function classify(a: Answer): Outcome {
  if (a.status === 402) return { kind: 'refused', reason: jsonOf(a.text)?.error ?? null }
  if (a.status === 503 || a.status === 409 || a.status >= 500) return { kind: 'retry', reason: null }
  if (a.status !== 200) return { kind: 'unexpected', reason: null }
  const result = rpcMessage(a.text)?.result as
    | { isError?: boolean; structuredContent?: { x402Version?: number; error?: string } }
    | undefined
  if (result === undefined) return { kind: 'unexpected', reason: 'no_result' }
  if (result.isError === true && result.structuredContent?.x402Version === 2)
    return { kind: 'refused', reason: result.structuredContent.error ?? null }
  if (result.isError === true) return { kind: 'unexpected', reason: 'tool_error' }
  return { kind: 'served', reason: null }
}

function jsonOf(text: string): Record<string, any> | null {
  try {
    return JSON.parse(text)
  } catch {
    return null
  }
}

/** The JSON-RPC message of a JSON answer, or the one with a result in an SSE answer. */
function rpcMessage(text: string): Record<string, unknown> | null {
  if (text.trimStart().startsWith('{')) return jsonOf(text)
  for (const line of text.split('\n')) {
    if (!line.startsWith('data:')) continue
    const msg = jsonOf(line.slice(5))
    if (msg !== null && ('result' in msg || 'error' in msg)) return msg
  }
  return null
}

/** The server's executions against the books: call rows, owner shares and refunds of each proof. */
async function judge(db: postgres.Sql, tasks: Task[], server: CountingMcpServer) {
  const rows = await db<
    {
      proof_key: string
      tool: string | null
      amount_atomic: string
      refund_atomic: string
      ceiling_atomic: string | null
      owner_share: string | null
    }[]
  >`
    SELECT call_proof_key(c.proof_key, c.proof) AS proof_key, c.tool, c.amount_atomic::text, c.refund_atomic::text, c.ceiling_atomic::text,
           -- Its own owner share entry, or its part of its capture (migration 0050) or settlement (0064)
           -- batch's, which reconcile holds to the sum of the batch's calls.
           coalesce(
             (SELECT sum(l.amount_atomic) FROM ledger_entries l
              WHERE l.source_type = 'call' AND l.source_id = c.id AND l.kind = 'owner_share'),
             (SELECT c.owner_share_atomic WHERE EXISTS (
                SELECT 1 FROM ledger_entries l WHERE l.source_type IN ('capture_batch', 'settlement_batch')
                  AND l.source_id = c.ledger_batch_id::text AND l.account_id = c.account_id
                  AND l.kind = 'owner_share')))::text AS owner_share
    FROM calls c`
  const byKey = new Map<string, Array<(typeof rows)[number]>>()
  for (const r of rows) byKey.set(r.proof_key, [...(byKey.get(r.proof_key) ?? []), r])
  let executedTwice = 0
  let executedUnpaid = 0
  let chargeMismatch = 0
  let ownerShareMismatch = 0
  let refundMismatch = 0
  let chargedAtomic = 0n
  for (const t of tasks) {
    const executed = server.executed.get(`${t.tool}:${t.ref}`) ?? 0
    if (t.kind === 'free') continue
    if (t.proofKey === null) {
      if (executed > 0) executedUnpaid++
      continue
    }
    const calls = byKey.get(t.proofKey) ?? []
    if (executed > 1) executedTwice++
    if (executed > 0 && calls.length === 0) executedUnpaid++
    if (t.done !== 'served') continue
    const c = calls[0]
    const expected = t.tool === 'report' ? BigInt(t.bytes) : WEATHER_ATOMIC
    if (calls.length !== 1 || c!.tool !== t.tool || BigInt(c!.amount_atomic) !== expected) {
      chargeMismatch++
      continue
    }
    const amount = BigInt(c!.amount_atomic)
    chargedAtomic += amount
    // x402 revenue is booked once its settlement is confirmed; a transaction's at once.
    if (c!.owner_share !== null && BigInt(c!.owner_share) !== (amount * OWNER_SHARE_BPS) / 10_000n)
      ownerShareMismatch++
    if (t.proofKey.startsWith('tx:') && c!.owner_share === null) ownerShareMismatch++
    if (t.tool === 'report') {
      if (
        c!.ceiling_atomic !== String(REPORT_CEILING_ATOMIC) ||
        amount > REPORT_CEILING_ATOMIC ||
        BigInt(c!.refund_atomic) !== REPORT_CEILING_ATOMIC - amount
      )
        refundMismatch++
    }
  }
  return { executedTwice, executedUnpaid, chargeMismatch, ownerShareMismatch, refundMismatch, chargedAtomic }
}
