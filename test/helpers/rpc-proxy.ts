// A JSON-RPC proxy on loopback in front of the chain (anvil), for tests that need the RPC to count, fail or
// vanish. It always counts (HTTP requests, and calls per method, batches included) and is in one mode:
//   pass         forwards every request
//   unavailable  answers every request 503, as a node behind a load balancer going down would
//   refuse       stops listening: new connections get ECONNREFUSED, open ones are reset
//   blackhole    accepts and never answers, until the client gives up
// refuseBroadcasts answers eth_sendRawTransaction 503 while reads pass (a provider rejecting transactions);
// loseBroadcastAnswers forwards it and answers 503 all the same (the node took it, the answer was lost);
// failMethods answers 503 to any request carrying one of those methods (one kind of look-up failing);
// withholdReceipts answers every receipt look-up "no receipt" (a node whose receipt index lags its nonce);
// beforeBroadcast is awaited before an eth_sendRawTransaction is passed on (a slow node, or a look at the
// moment); beforeLogs likewise before an eth_getLogs (the chain moving on while a scan is under way);
// afterAnswer is awaited with the request and the node's answer before that answer is passed back (the chain
// moving on between a read and what is done with it); stripLogTimestamps answers as nodes that leave blockTimestamp off logs do; maxLogRange refuses an
// eth_getLogs over more blocks than that with a JSON-RPC error, as hosted providers do.
// Plain node, no vitest import: the chaos runner uses it outside vitest too.
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http'

export type RpcProxyMode = 'pass' | 'unavailable' | 'refuse' | 'blackhole'

export interface RpcProxy {
  url: string
  /** Calls seen per JSON-RPC method (in pass mode; a refused broadcast is not counted). */
  readonly counts: Map<string, number>
  /** HTTP requests that reached the proxy, in any mode but refuse (a batch is one). */
  readonly requests: number
  /** While true, requests carrying eth_sendRawTransaction are answered 503; everything else passes. */
  refuseBroadcasts: boolean
  /** Broadcasts reach the node, and their answers are lost (503). */
  loseBroadcastAnswers: boolean
  /** Requests carrying any of these JSON-RPC methods are answered 503; the rest pass. */
  failMethods: string[]
  /** While true, every eth_getTransactionReceipt is answered with a null result, as if not mined. */
  withholdReceipts: boolean
  /** Receipts answered null by withholdReceipts. */
  readonly withheld: number
  /** Requests refused by refuseBroadcasts. */
  readonly refused: number
  /** While true, `blockTimestamp` is removed from every log in the answers, as older nodes answer. */
  stripLogTimestamps: boolean
  /** When set, an eth_getLogs spanning more blocks is answered with a JSON-RPC error (HTTP 200). */
  maxLogRange: number | null
  /** Awaited with the body before a request carrying eth_sendRawTransaction is passed on. */
  beforeBroadcast: ((body: string) => Promise<void>) | null
  /** Awaited with the body before a request carrying eth_getLogs is passed on. */
  beforeLogs: ((body: string) => Promise<void>) | null
  /** Awaited with the request's body and the node's answer before the answer is passed back. */
  afterAnswer: ((body: string, answer: string) => Promise<void>) | null
  /** When an array, the body of every request passed on is appended (tests look for the calls they mean). */
  bodies: string[] | null
  mode(): RpcProxyMode
  /** Drops every open connection (a client sees the change at once), then takes the new mode. */
  setMode(mode: RpcProxyMode): Promise<void>
  close(): Promise<void>
}

export async function startRpcProxy(targetUrl: string): Promise<RpcProxy> {
  const counts = new Map<string, number>()
  let mode: RpcProxyMode = 'pass'
  let requests = 0
  let refused = 0
  let withheld = 0
  let port = 0
  const state = {
    refuseBroadcasts: false,
    loseBroadcastAnswers: false,
    failMethods: [] as string[],
    withholdReceipts: false,
    stripLogTimestamps: false,
    maxLogRange: null as number | null,
    bodies: null as string[] | null,
    beforeBroadcast: null as ((body: string) => Promise<void>) | null,
    beforeLogs: null as ((body: string) => Promise<void>) | null,
    afterAnswer: null as ((body: string, answer: string) => Promise<void>) | null,
  }

  const handle = async (req: IncomingMessage, res: ServerResponse) => {
    requests++
    // Black-holed: the request is read and nothing ever comes back.
    if (mode === 'blackhole') return void req.resume()
    const chunks: Buffer[] = []
    for await (const chunk of req) chunks.push(chunk as Buffer)
    const body = Buffer.concat(chunks).toString('utf8')
    if (mode === 'unavailable') return void res.writeHead(503).end('unavailable')
    if (state.refuseBroadcasts && body.includes('eth_sendRawTransaction')) {
      refused++
      return void res.writeHead(503).end('broadcasts refused')
    }
    if (state.loseBroadcastAnswers && body.includes('eth_sendRawTransaction')) {
      refused++
      await fetch(targetUrl, { method: 'POST', headers: { 'content-type': 'application/json' }, body })
        .then((r) => r.text())
        .catch(() => undefined)
      return void res.writeHead(503).end('answer lost')
    }
    if (state.failMethods.some((m) => body.includes(`"${m}"`))) {
      refused++
      return void res.writeHead(503).end('method failing')
    }
    const tooWide = state.maxLogRange === null ? null : tooWideLogs(body, state.maxLogRange)
    if (tooWide !== null) {
      refused++
      return void res.writeHead(200, { 'content-type': 'application/json' }).end(tooWide)
    }
    if (state.beforeBroadcast !== null && body.includes('eth_sendRawTransaction'))
      await state.beforeBroadcast(body)
    if (state.beforeLogs !== null && body.includes('"eth_getLogs"')) await state.beforeLogs(body)
    count(counts, body)
    state.bodies?.push(body)
    try {
      const upstream = await fetch(targetUrl, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body,
      })
      res.writeHead(upstream.status, { 'content-type': 'application/json' })
      let text = await upstream.text()
      if (state.withholdReceipts && body.includes('"eth_getTransactionReceipt"')) {
        const withholding = withholdReceipts(body, text)
        withheld += withholding.count
        text = withholding.text
      }
      if (state.afterAnswer !== null) await state.afterAnswer(body, text)
      res.end(state.stripLogTimestamps ? text.replace(/,"blockTimestamp":"0x[0-9a-f]+"/g, '') : text)
    } catch {
      res.writeHead(502).end('upstream unreachable')
    }
  }
  const server: Server = createServer((req, res) => {
    handle(req, res).catch(() => res.destroy())
  })
  const listen = () =>
    new Promise<void>((resolve, reject) => {
      server.once('error', reject)
      // Back on the same port after refuse: the clients under test keep their URL.
      server.listen(port, '127.0.0.1', () => {
        server.removeListener('error', reject)
        resolve()
      })
    })
  const stopListening = () =>
    new Promise<void>((resolve) => {
      server.close(() => resolve())
      server.closeAllConnections()
    })
  await listen()
  port = (server.address() as { port: number }).port

  return {
    url: `http://127.0.0.1:${port}`,
    counts,
    get requests() {
      return requests
    },
    get refuseBroadcasts() {
      return state.refuseBroadcasts
    },
    set refuseBroadcasts(on: boolean) {
      state.refuseBroadcasts = on
    },
    get loseBroadcastAnswers() {
      return state.loseBroadcastAnswers
    },
    set loseBroadcastAnswers(on: boolean) {
      state.loseBroadcastAnswers = on
    },
    get failMethods() {
      return state.failMethods
    },
    set failMethods(methods: string[]) {
      state.failMethods = methods
    },
    get withholdReceipts() {
      return state.withholdReceipts
    },
    set withholdReceipts(on: boolean) {
      state.withholdReceipts = on
    },
    get withheld() {
      return withheld
    },
    get refused() {
      return refused
    },
    get maxLogRange() {
      return state.maxLogRange
    },
    set maxLogRange(blocks: number | null) {
      state.maxLogRange = blocks
    },
    get stripLogTimestamps() {
      return state.stripLogTimestamps
    },
    set stripLogTimestamps(on: boolean) {
      state.stripLogTimestamps = on
    },
    get beforeBroadcast() {
      return state.beforeBroadcast
    },
    set beforeBroadcast(hook: ((body: string) => Promise<void>) | null) {
      state.beforeBroadcast = hook
    },
    get beforeLogs() {
      return state.beforeLogs
    },
    set beforeLogs(hook: ((body: string) => Promise<void>) | null) {
      state.beforeLogs = hook
    },
    get afterAnswer() {
      return state.afterAnswer
    },
    set afterAnswer(hook: ((body: string, answer: string) => Promise<void>) | null) {
      state.afterAnswer = hook
    },
    get bodies() {
      return state.bodies
    },
    set bodies(list: string[] | null) {
      state.bodies = list
    },
    mode: () => mode,
    async setMode(next) {
      if (next === mode) return
      const was = mode
      mode = next
      if (next === 'refuse') await stopListening()
      else {
        server.closeAllConnections()
        if (was === 'refuse') await listen()
      }
    },
    async close() {
      if (mode !== 'refuse') await stopListening()
    },
  }
}

/** The answer with the result of every receipt look-up of the request set to null, and how many were. */
function withholdReceipts(body: string, answer: string): { text: string; count: number } {
  type Call = { id?: unknown; method?: string }
  type Reply = { id?: unknown; result?: unknown }
  const calls = ([] as Call[]).concat(JSON.parse(body) as Call | Call[])
  const ids = new Set(calls.filter((c) => c.method === 'eth_getTransactionReceipt').map((c) => c.id))
  const parsed = JSON.parse(answer) as Reply | Reply[]
  let count = 0
  for (const reply of ([] as Reply[]).concat(parsed)) {
    if (ids.has(reply.id) && reply.result !== null) {
      reply.result = null
      count++
    }
  }
  return { text: JSON.stringify(parsed), count }
}

/** Adds the JSON-RPC calls of one body (a call or a batch) to counts. */
function count(counts: Map<string, number>, body: string): void {
  let parsed: unknown
  try {
    parsed = JSON.parse(body)
  } catch {
    return
  }
  for (const call of Array.isArray(parsed) ? parsed : [parsed]) {
    const method = (call as { method?: unknown })?.method
    if (typeof method === 'string') counts.set(method, (counts.get(method) ?? 0) + 1)
  }
}

/**
 * The error answer a provider gives a request carrying an eth_getLogs over more than `max` blocks (each call
 * of it answered with the error, by its id), or null when the request asks for no such range.
 */
function tooWideLogs(body: string, max: number): string | null {
  if (!body.includes('"eth_getLogs"')) return null
  type Call = { id?: unknown; method?: string; params?: [{ fromBlock?: string; toBlock?: string }] }
  const parsed = JSON.parse(body) as Call | Call[]
  const calls = Array.isArray(parsed) ? parsed : [parsed]
  const wide = calls.some((c) => {
    const q = c.method === 'eth_getLogs' ? c.params?.[0] : undefined
    if (!q?.fromBlock?.startsWith('0x') || !q.toBlock?.startsWith('0x')) return false
    return Number(BigInt(q.toBlock) - BigInt(q.fromBlock)) + 1 > max
  })
  if (!wide) return null
  const error = (c: Call) => ({
    jsonrpc: '2.0',
    id: c.id ?? null,
    error: { code: -32005, message: `query exceeds max block range ${max}` },
  })
  return JSON.stringify(Array.isArray(parsed) ? parsed.map(error) : error(parsed))
}
