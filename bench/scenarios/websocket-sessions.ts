// npm run bench -- websocket-sessions [--sessions N] [--seconds S] [--ask-ms M] [--words W] [--vouchers V]
// [--workers P] [--runtime built|tsx] [--out file]: paid WebSocket sessions against demo-realtime (its own process).
// 1. N sessions opened on tollgate, each with its own USDC transaction hash (prepaid credit), held open: the
//    instance's RSS before and after, per session. 2. For S seconds each session asks for an answer of W words
//    every M ms: messages relayed to the clients per second, and tollgate's CPU per message relayed. 3. The
//    same N sockets and load through a bare uWS WebSocket relay of the same upstream (no payment work):
//    messages/s and CPU per message, the ratio. 4. V top-ups by channel voucher (sessions opened by the
//    published x402 batch-settlement client, each voucher sent on the socket): the round trip, send to
//    answer, p50/p99. The target run is 10,000 sessions on the bench machine; the default is a quick 500.
// A relayed session holds two sockets in the relay's process, and a process may hold `ulimit -n` files (20,000
// on the bench machine, not raisable there): 10,000 sessions take `--workers 2`, tollgate's two data-plane
// processes against two bare relay processes on one port, so both hold the same sockets per process.
import { execFileSync } from 'node:child_process'
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { parseArgs } from 'node:util'
import { x402Client } from '@x402/core/client'
import { BatchSettlementEvmScheme } from '@x402/evm/batch-settlement/client'
import { createPublicClient, type Hex, http } from 'viem'
import { privateKeyToAccount } from 'viem/accounts'
import WebSocket from 'ws'
import { type DevChain, startDevChain } from '../../src/chain/dev-chain.ts'
import { cpuTicks, withChildren } from '../cpu.ts'
import { makeProofs } from '../proofs.ts'
import { machine } from '../report.ts'
import { startBareWsRelay } from '../targets/bare-ws-relay.ts'
import { ROOT, startTs } from '../targets/processes.ts'
import type { Target } from '../targets/target.ts'
import { devChainOf, startTollgate } from '../targets/tollgate.ts'

/** $0.01 of credit a session; $0.1 / $0.05 / $0.4 per million tokens: never spent in a bench run. */
const PRICING = {
  model: 'usage',
  unit: 'tokens',
  max_price: 0.01,
  input_price_per_million: 0.1,
  cached_input_price_per_million: 0.05,
  output_price_per_million: 0.4,
}
/** The voucher part: 50 base units a token, a voucher of 10,000 buys 200 tokens: one top-up per answer. */
const VOUCHER_PRICING = { ...PRICING, output_price_per_million: 50 }
const TICKS_PER_S = 100
/** Sockets opened at once. */
const OPEN_CONCURRENCY = 200

interface Options {
  sessions: number
  seconds: number
  askMs: number
  words: number
  vouchers: number
  workers: number
  runtime: 'built' | 'tsx'
  out: string | null
}

function options(args: string[]): Options {
  const { values } = parseArgs({
    args,
    options: {
      sessions: { type: 'string' },
      seconds: { type: 'string' },
      'ask-ms': { type: 'string' },
      words: { type: 'string' },
      vouchers: { type: 'string' },
      workers: { type: 'string' },
      runtime: { type: 'string' },
      out: { type: 'string' },
    },
    strict: true,
  })
  return {
    sessions: Number(values.sessions ?? process.env.BENCH_WS_SESSIONS ?? 500),
    seconds: Number(values.seconds ?? 10),
    askMs: Number(values['ask-ms'] ?? 1_000),
    words: Number(values.words ?? 20),
    vouchers: Number(values.vouchers ?? 200),
    workers: Number(values.workers ?? 1),
    runtime: values.runtime === 'tsx' ? 'tsx' : 'built',
    out: values.out ?? null,
  }
}

interface Held {
  ws: WebSocket
  received: number
}

/** RSS (bytes) of the processes and their children. */
function rssBytes(pid: number): number {
  let total = 0
  for (const p of withChildren([pid])) {
    try {
      const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${p}/status`, 'utf8'))
      if (m) total += Number(m[1]) * 1024
    } catch {}
  }
  return total
}

/**
 * RSS once it holds still (two samples 1 s apart within 1 %, at most 15 s): a process just started, or just
 * relieved of a load, gives memory back for a while (a start-up's 719 MiB read as 523 MiB a few seconds later).
 */
async function settledRss(pids: number[]): Promise<number> {
  const rss = () => pids.reduce((n, p) => n + rssBytes(p), 0)
  let last = rss()
  for (let i = 0; i < 15; i++) {
    await new Promise((r) => setTimeout(r, 1_000))
    const now = rss()
    if (Math.abs(now - last) <= last / 100) return now
    last = now
  }
  return last
}

const ticksOf = (pids: number[]) => withChildren(pids).reduce((n, p) => n + cpuTicks(p), 0)

/** Opens n sockets, OPEN_CONCURRENCY at a time; each counts the messages it receives. */
async function openAll(
  url: string,
  headers: (i: number) => Record<string, string>,
  n: number,
): Promise<Held[]> {
  const held: Held[] = []
  let next = 0
  const one = (i: number) =>
    new Promise<Held>((resolve, reject) => {
      const ws = new WebSocket(url.replace(/^http/, 'ws'), { headers: headers(i), perMessageDeflate: false })
      const h: Held = { ws, received: 0 }
      ws.on('message', () => {
        h.received++
      })
      ws.once('open', () => resolve(h))
      ws.once('unexpected-response', (_req, res) => {
        let body = ''
        res.on('data', (c: Buffer) => {
          body += c
        })
        res.on('end', () => reject(new Error(`session ${i}: HTTP ${res.statusCode} ${body.slice(0, 300)}`)))
      })
      ws.once('error', reject)
    })
  await Promise.all(
    Array.from({ length: Math.min(OPEN_CONCURRENCY, n) }, async () => {
      while (next < n) held.push(await one(next++))
    }),
  )
  return held
}

/** Every session asks for an answer every askMs for `seconds`: messages relayed, and the target's CPU. */
async function relayLoad(held: Held[], pids: number[], o: Options) {
  const ask = JSON.stringify({ type: 'response.create', response: { words: o.words } })
  const before = held.reduce((n, h) => n + h.received, 0)
  const ticks = ticksOf(pids)
  const started = performance.now()
  const timers = held.map((h, i) => {
    // Spread over the period, so the load is steady rather than N answers at once.
    let timer: NodeJS.Timeout | null = null
    const first = setTimeout(
      () => {
        h.ws.send(ask)
        timer = setInterval(() => h.ws.send(ask), o.askMs)
      },
      (i * o.askMs) / held.length,
    )
    return () => {
      clearTimeout(first)
      if (timer) clearInterval(timer)
    }
  })
  await new Promise((r) => setTimeout(r, o.seconds * 1000))
  for (const stop of timers) stop()
  // The answers asked for last arrive within a moment.
  await new Promise((r) => setTimeout(r, 500))
  const elapsedS = (performance.now() - started) / 1000
  const messages = held.reduce((n, h) => n + h.received, 0) - before
  const cpuS = (ticksOf(pids) - ticks) / TICKS_PER_S
  return {
    messages,
    messages_per_s: Math.round(messages / elapsedS),
    cpu_us_per_message: messages > 0 ? Math.round((cpuS / messages) * 1e6 * 100) / 100 : null,
    cpu_cores: Math.round((cpuS / elapsedS) * 100) / 100,
  }
}

async function closeAll(held: Held[]): Promise<void> {
  await Promise.all(
    held.map(
      (h) =>
        new Promise<void>((resolve) => {
          if (h.ws.readyState === WebSocket.CLOSED) return resolve()
          h.ws.once('close', () => resolve())
          h.ws.close(1000)
        }),
    ),
  )
}

/** V vouchers sent as top-ups on sessions opened by the published client: send → answer, in ms. */
async function voucherRoundTrips(chain: DevChain, url: string, count: number, words: number) {
  const publicClient = createPublicClient({ transport: http(chain.rpcUrl) })
  const account = privateKeyToAccount(chain.payers[0]!.privateKey as Hex)
  const caip2 = `eip155:${chain.chainId}` as const
  const signer = {
    address: account.address,
    signTypedData: (m: Parameters<typeof account.signTypedData>[0]) => account.signTypedData(m),
    readContract: (args: Parameters<typeof publicClient.readContract>[0]) => publicClient.readContract(args),
  }
  const scheme = new BatchSettlementEvmScheme(signer as never, {
    depositPolicy: { depositMultiplier: count + 10 },
  })
  const client = x402Client.fromConfig({
    schemes: [{ network: caip2, client: scheme }],
    spendControls: { allowedAssets: [{ network: caip2, asset: chain.usdcAddress }] },
  })
  const b64 = (o: unknown) => Buffer.from(JSON.stringify(o)).toString('base64')
  const unb64 = (s: string) => JSON.parse(Buffer.from(s, 'base64').toString('utf8'))
  const times: number[] = []
  // One session at a time on the one channel (a channel holds one voucher in flight): reopened when it ends.
  while (times.length < count) {
    const unpaid = await fetch(url)
    const opening = await client.createPaymentPayload(unb64(unpaid.headers.get('payment-required')!))
    let upgradeHeaders: Record<string, unknown> = {}
    const ws = new WebSocket(url.replace(/^http/, 'ws'), {
      headers: { 'payment-signature': b64(opening) },
      perMessageDeflate: false,
    })
    ws.on('upgrade', (res) => {
      upgradeHeaders = res.headers
    })
    await new Promise((resolve, reject) => {
      ws.once('open', resolve)
      ws.once('error', reject)
    })
    await client.handlePaymentResponse({
      paymentPayload: opening,
      requirements: opening.accepted,
      settleResponse: unb64(String(upgradeHeaders['payment-response'])),
    })
    let levels = 0
    let chain$ = Promise.resolve()
    const done = new Promise<void>((resolve) => ws.once('close', () => resolve()))
    const topUp = async (ask: any) => {
      const next = await client.createPaymentPayload(ask.error.paymentRequired)
      const id = ++levels
      const answered = new Promise<any>((resolve) => {
        const on = (d: Buffer) => {
          const r = JSON.parse(d.toString())
          if (r.id !== id) return
          ws.off('message', on)
          resolve(r)
        }
        ws.on('message', on)
      })
      const sent = performance.now()
      ws.send(JSON.stringify({ id, method: 'tollgate.top_up', payment: next }))
      const r = await answered
      times.push(performance.now() - sent)
      if (r.paymentResponse)
        await client.handlePaymentResponse({
          paymentPayload: next,
          requirements: next.accepted,
          settleResponse: r.paymentResponse,
        })
      if (times.length >= count) ws.close(1000)
      else ws.send(JSON.stringify({ type: 'response.create', response: { words } }))
    }
    const asked = new Set<string>()
    ws.on('message', (data) => {
      const m = JSON.parse(data.toString())
      if (m.error?.code !== 402 || m.id !== undefined) return
      // One voucher per credit level (credit_low and credit_exhausted ask for the same).
      const level = m.metadata.tollgate.credit_atomic
      if (asked.has(level)) return
      asked.add(level)
      chain$ = chain$.then(() => topUp(m))
    })
    ws.send(JSON.stringify({ type: 'response.create', response: { words } }))
    await done
  }
  times.sort((a, b) => a - b)
  const at = (q: number) =>
    Math.round(times[Math.min(times.length - 1, Math.floor(q * times.length))]! * 100) / 100
  return { vouchers: times.length, p50_ms: at(0.5), p99_ms: at(0.99), max_ms: at(1) }
}

async function startRealtime(maxMs: number): Promise<Target> {
  const child = await startTs(
    'bench/targets/realtime-upstream-server.ts',
    { MAX_MS: String(maxMs) },
    /"port"/,
  )
  return {
    name: 'demo-realtime',
    base: `http://127.0.0.1:${JSON.parse(child.line).port}`,
    pid: child.proc.pid ?? null,
    stop: () => child.stop(),
  }
}

export async function runWebsocketSessions(args: string[]): Promise<void> {
  const o = options(args)
  if (o.runtime === 'built')
    execFileSync(process.execPath, [join(ROOT, 'scripts', 'build.mjs'), '--if-stale'], { stdio: 'inherit' })
  const dir = mkdtempSync(join(tmpdir(), 'tollgate-ws-bench-'))
  const say = (line: string) => process.stdout.write(`websocket-sessions: ${line}\n`)
  const chain = await startDevChain({ chainId: 84532, payers: 1, payerFunding: 100_000_000_000n })
  const stops: Array<() => Promise<unknown>> = [() => chain.stop()]
  try {
    const upstream = await startRealtime(30 * 60_000)
    stops.push(() => upstream.stop())
    const tollgate = await startTollgate({
      name: 'ws',
      dir,
      chain: devChainOf(chain),
      upstream: upstream.base,
      watch: true,
      runtime: o.runtime,
      jobs: true,
      workers: o.workers,
    })
    stops.push(() => tollgate.stop())
    const url = await tollgate.metered('/v1/realtime', { pricing: PRICING, websocket: {} })
    const made = performance.now()
    const proofs = await makeProofs({
      rpcUrl: chain.rpcUrl,
      chainId: chain.chainId,
      usdc: chain.usdcAddress as Hex,
      payerKey: chain.payers[0]!.privateKey as Hex,
      treasury: chain.treasury.address as Hex,
      value: 10_000n,
      count: o.sessions,
    })
    say(`${o.sessions} transfers paid in ${Math.round(performance.now() - made)} ms`)

    const pids = [tollgate.pid!]
    const rssBefore = await settledRss(pids)
    const opening = performance.now()
    const paid = await openAll(url, (i) => ({ 'x-payment': proofs[i]! }), o.sessions)
    const openS = (performance.now() - opening) / 1000
    const rssOpen = await settledRss(pids)
    say(
      `${paid.length} paid sessions open in ${openS.toFixed(1)} s; RSS ${Math.round(rssBefore / 2 ** 20)} → ${Math.round(rssOpen / 2 ** 20)} MiB`,
    )
    const tollgateLoad = await relayLoad(paid, pids, o)
    say(`tollgate: ${JSON.stringify(tollgateLoad)}`)
    await closeAll(paid)

    const bare = await startBareWsRelay({
      upstream: `${upstream.base}/v1/realtime`,
      maxMs: 30 * 60_000,
      processes: o.workers,
    })
    stops.push(() => bare.stop())
    const bareRssBefore = await settledRss(bare.pids)
    const plain = await openAll(bare.base, () => ({}), o.sessions)
    const bareRssOpen = await settledRss(bare.pids)
    const bareLoad = await relayLoad(plain, bare.pids, o)
    say(`bare uWS relay: ${JSON.stringify(bareLoad)}`)
    await closeAll(plain)

    const voucherUrl = await tollgate.metered('/v1/realtime', {
      pricing: VOUCHER_PRICING,
      batch: true,
      websocket: { top_up_wait_ms: 10_000 },
    })
    const vouchers = o.vouchers > 0 ? await voucherRoundTrips(chain, voucherUrl, o.vouchers, 250) : null
    say(`voucher round trip: ${JSON.stringify(vouchers)}`)

    const result = {
      scenario: 'websocket-sessions',
      machine: machine({ runtime: o.runtime }),
      settings: o,
      sessions: {
        open: paid.length,
        open_s: Math.round(openS * 10) / 10,
        rss_per_session_kib: Math.round((rssOpen - rssBefore) / paid.length / 1024),
        bare_rss_per_session_kib: Math.round((bareRssOpen - bareRssBefore) / plain.length / 1024),
      },
      tollgate: tollgateLoad,
      bare_ws_relay: bareLoad,
      ratio_to_bare:
        bareLoad.messages_per_s > 0
          ? Math.round((tollgateLoad.messages_per_s / bareLoad.messages_per_s) * 1000) / 1000
          : null,
      vouchers,
    }
    process.stdout.write(`${JSON.stringify(result, null, 2)}\n`)
    if (o.out) writeFileSync(o.out, `${JSON.stringify(result, null, 2)}\n`)
  } finally {
    for (const stop of stops.reverse()) await stop().catch(() => {})
  }
}
