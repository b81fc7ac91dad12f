// A real node:http upstream on 127.0.0.1:0 for proxy tests: records every request it receives and serves
// the routes those tests need (echo, big, chunked, sse, status, redirect, slow, hang-body, set-cookies).
import { createHash } from 'node:crypto'
import { createServer, type IncomingHttpHeaders, type IncomingMessage, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'

export interface RecordedRequest {
  method: string
  /** Path and query as received. */
  url: string
  headers: IncomingHttpHeaders
  /** Names and values in arrival order, to see repeated and removed headers exactly. */
  rawHeaders: string[]
  /** Filled in once the whole body has arrived. */
  body: Buffer
  bodyComplete: boolean
  /** When the response finished, or when the peer closed before it did. */
  finishedAt: number | null
  closedEarlyAt: number | null
}

/** Handles a request itself (returns true) or leaves it to the built-in routes. */
export type UpstreamHandler = (req: IncomingMessage, res: ServerResponse, record: RecordedRequest) => boolean

export interface Upstream {
  /** 'http://127.0.0.1:<port>' */
  url: string
  port: number
  count(): number
  requests: RecordedRequest[]
  last(): RecordedRequest | undefined
  /** When the latest /sse stream finished, or null while it runs. */
  sseFinishedAt(): number | null
  /** Whether the latest /hang-body request was closed by its peer (it never finishes by itself). */
  hangAborted(): boolean
  close(): Promise<void>
}

/** Deterministic content for /big, so a test can hash what it expects without the server. */
export function bigBody(bytes: number): Buffer {
  const body = Buffer.allocUnsafe(bytes)
  for (let i = 0; i < bytes; i++) body[i] = (i * 31 + (i >>> 10)) & 255
  return body
}

export function sha256(data: Buffer): string {
  return createHash('sha256').update(data).digest('hex')
}

export async function startUpstream(handler?: UpstreamHandler): Promise<Upstream> {
  const requests: RecordedRequest[] = []
  const bigBodies = new Map<number, Buffer>()
  const server = createServer((req, res) => {
    const record: RecordedRequest = {
      method: req.method ?? '',
      url: req.url ?? '',
      headers: req.headers,
      rawHeaders: req.rawHeaders,
      body: Buffer.alloc(0),
      bodyComplete: false,
      finishedAt: null,
      closedEarlyAt: null,
    }
    requests.push(record)
    res.on('finish', () => {
      record.finishedAt = Date.now()
    })
    res.on('close', () => {
      if (!res.writableFinished) record.closedEarlyAt = Date.now()
    })
    const chunks: Buffer[] = []
    req.on('data', (chunk: Buffer) => chunks.push(chunk))
    req.on('end', () => {
      record.body = Buffer.concat(chunks)
      record.bodyComplete = true
      if (handler?.(req, res, record)) return
      route(req, res, record, bigBodies)
    })
  })
  // Connections the proxy keeps alive must not hold close() up.
  server.keepAliveTimeout = 5_000
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address() as AddressInfo
  return {
    url: `http://127.0.0.1:${port}`,
    port,
    count: () => requests.length,
    requests,
    last: () => requests.at(-1),
    sseFinishedAt: () => latest(requests, '/sse')?.finishedAt ?? null,
    hangAborted: () => latest(requests, '/hang-body')?.closedEarlyAt != null,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections()
        server.close(() => resolve())
      }),
  }
}

function latest(requests: RecordedRequest[], route: string): RecordedRequest | undefined {
  return requests.findLast((record) => routeOf(record.url) === route)
}

/** Routes match on the first path segment, so an endpoint's upstream_url may add its own rest. */
function routeOf(url: string): string {
  const path = url.split('?', 1)[0]!
  const second = path.indexOf('/', 1)
  return second === -1 ? path : path.slice(0, second)
}

function route(
  req: IncomingMessage,
  res: ServerResponse,
  record: RecordedRequest,
  bigBodies: Map<number, Buffer>,
) {
  const url = new URL(record.url, 'http://upstream')
  const path = url.pathname
  const first = routeOf(path)
  if (first === '/echo') {
    const body = JSON.stringify({
      method: record.method,
      url: record.url,
      path,
      query: url.search.slice(1),
      headers: record.headers,
      body: record.body.length <= 65_536 ? record.body.toString('utf8') : null,
      bodyLength: record.body.length,
      bodySha256: sha256(record.body),
    })
    res.writeHead(200, {
      'content-type': 'application/json',
      'content-length': String(Buffer.byteLength(body)),
      'x-upstream': 'echo',
    })
    res.end(body)
    return
  }
  if (first === '/big') {
    const bytes = Number(url.searchParams.get('bytes') ?? '1024')
    let body = bigBodies.get(bytes)
    if (body === undefined) {
      body = bigBody(bytes)
      bigBodies.set(bytes, body)
    }
    if (url.searchParams.has('chunked')) {
      res.writeHead(200, { 'content-type': 'application/octet-stream' })
      writeInPieces(res, body, 0)
    } else {
      res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': String(bytes) })
      res.end(req.method === 'HEAD' ? undefined : body)
    }
    return
  }
  if (first === '/chunked') {
    res.writeHead(200, { 'content-type': 'text/plain' })
    let i = 0
    const timer = setInterval(() => {
      res.write(`chunk-${i}\n`)
      if (++i === 5) {
        clearInterval(timer)
        res.end()
      }
    }, 20)
    res.on('close', () => clearInterval(timer))
    return
  }
  if (first === '/sse') {
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' })
    let i = 0
    const send = () => res.write(`data: ${i}\n\n`)
    send()
    const timer = setInterval(() => {
      if (++i === 5) {
        clearInterval(timer)
        res.end()
        return
      }
      send()
    }, 100)
    res.on('close', () => clearInterval(timer))
    return
  }
  const status = /^\/status\/(\d{3})/.exec(path)
  if (status) {
    const code = Number(status[1])
    if (code === 204 || code === 304) {
      res.writeHead(code)
      res.end()
    } else {
      res.writeHead(code, { 'content-type': 'application/json' })
      res.end(JSON.stringify({ status: code }))
    }
    return
  }
  if (first === '/redirect') {
    res.writeHead(302, { location: '/echo', 'content-type': 'text/plain' })
    res.end('redirecting')
    return
  }
  if (first === '/slow') {
    // A slow upstream is the thing under test of the routes that call /slow.
    const timer = setTimeout(
      () => {
        res.writeHead(200, { 'content-type': 'text/plain' })
        res.end('slow')
      },
      Number(url.searchParams.get('ms') ?? '1000'),
    )
    res.on('close', () => clearTimeout(timer))
    return
  }
  if (first === '/hang-body') {
    res.writeHead(200, { 'content-type': 'text/plain' })
    res.write('started\n')
    return
  }
  if (first === '/set-cookies') {
    res.setHeader('set-cookie', ['a=1; Path=/', 'b=2; Path=/; HttpOnly'])
    res.setHeader('content-type', 'text/plain')
    res.end('cookies')
    return
  }
  if (first === '/hop-headers') {
    res.setHeader('connection', 'keep-alive, x-hop')
    res.setHeader('x-hop', 'dropped')
    res.setHeader('proxy-authenticate', 'Basic')
    res.setHeader('x-kept', 'yes')
    res.setHeader('content-type', 'text/plain')
    res.end('hop')
    return
  }
  res.writeHead(404, { 'content-type': 'text/plain' })
  res.end('no such route')
}

/** Writes without content-length (so chunked), honouring the socket's backpressure. */
function writeInPieces(res: ServerResponse, body: Buffer, from: number): void {
  let offset = from
  while (offset < body.length) {
    const piece = body.subarray(offset, offset + 65_536)
    offset += piece.length
    if (!res.write(piece)) {
      res.once('drain', () => writeInPieces(res, body, offset))
      return
    }
  }
  res.end()
}
