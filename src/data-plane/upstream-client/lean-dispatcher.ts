// tollgate's own HTTP/1.1 client for the relay: keep-alive sockets per upstream origin, one request at a time
// on each, the answer read by ResponseReader and handed to the proxy's handler as views of the chunks the
// socket read. Each socket reads into a buffer of its own (readIntoOwnBuffer), so a chunk, and a head's raw
// fields, are good until the handler returns, or while it keeps the exchange paused: what it keeps longer it
// copies. It exists for speed: undici's path costs a small relayed call 6–22 % more CPU (its request
// object, header checks, wasm parser and the copy of every read into it; docs/benchmarks.md, "The relay's
// own HTTP/1.1 client"). Sockets come from undici's connector, so TLS, the connect timeout and the SSRF guard
// are the same; `proxy.upstream_client: "undici"` goes back to undici's Agent. The handler contract is
// undici's legacy one (onConnect/onHeaders/onData/onComplete/onError), which the proxy's Forward implements,
// and the error codes are undici's, which the proxy classifies.
import type { OnReadOpts, Socket } from 'node:net'
import type { buildConnector, Dispatcher } from 'undici'
import { ResponseReader, type ResponseSink } from './response-reader.ts'

interface UpstreamHandler {
  onConnect?(abort: (err?: Error) => void): void
  onHeaders?(status: number, head: Buffer[], resume: () => void, statusText?: string): boolean
  onData?(chunk: Buffer): boolean
  onComplete?(trailers: Buffer[] | null): void
  onError?(err: Error): void
  /**
   * Runs `feed`, which hands one read of the socket to the callbacks above: a handler that writes what it
   * is handed can make the writes of one read a single send (the proxy corks its client's socket around
   * it). Not part of undici's contract: with undici's Agent it is never called.
   */
  onRead?(feed: () => void): void
}

interface UpstreamRequestOptions {
  origin?: string | URL
  path: string
  method: string
  /** Flat [name, value, …] list (the proxy's form). */
  headers?: string[] | null
  body?: Buffer | Uint8Array | string | AsyncIterable<Buffer> | Iterable<Buffer> | null
  headersTimeout?: number | null
  bodyTimeout?: number | null
}

export interface LeanDispatcherOptions {
  connections?: number | null
  connect: buildConnector.connector
  /** Whether its sockets may reach private addresses (no SSRF guard in `connect`). */
  allowPrivate: boolean
  /** How long an idle socket is kept (less if the upstream says it keeps them for less). */
  keepAliveMs?: number
}

const KEEP_ALIVE_MS = 4_000
/** An upstream's own keep-alive timeout is trusted less this much: its close may already be on the way. */
const KEEP_ALIVE_MARGIN_MS = 1_000
const SWEEP_MS = 1_000

/**
 * Each socket reads into one buffer of its own, reused from read to read, not into a fresh 64 KB buffer per
 * read as Node's default does: those allocations outside V8's heap, and the old-generation collections they
 * set off, cost the relay more than half its CPU per large answer (relay-256k, this machine: 354 µs per
 * 256 KB with fresh buffers, 132–152 with reused ones, nginx 125–159 in the same runs; 16 KB buffers 213–217).
 * The price is memory held while the socket is open, so the buffer follows the reads: 64 KB while they fill
 * it, 4 KB once a run of them used little of it (a token stream, small answers), grown again by a read that
 * fills it. A thousand open token streams hold 4 MB, not 64.
 */
const READ_BUFFER_MAX = 64 * 1024
const READ_BUFFER_MIN = 4 * 1024
/** Consecutive reads under an eighth of the buffer before it shrinks. */
const SMALL_READS_TO_SHRINK = 16
const CONNECTION = Symbol('tollgate.connection')
/** The buffer for the next read of the socket that read last: Node asks for it right after the callback. */
let nextRead: Buffer | null = null

/**
 * The sockets' `onread` (net and tls connect options, passed by the connector). Node calls `buffer()` once
 * when a socket gets its handle, then after every read for the buffer of the next one: a new socket gets a
 * buffer of its own, a socket that has just read gets what its connection chose (its own, or a resized one).
 * The callback runs as a method of the socket. A buffer given up is never handed to another socket, so the
 * views of it still held stay valid.
 */
export const readIntoOwnBuffer: OnReadOpts = {
  buffer(): Buffer {
    const next = nextRead
    if (next === null) return Buffer.allocUnsafeSlow(READ_BUFFER_MAX)
    nextRead = null
    return next
  },
  callback(this: Socket, n: number, buf: Uint8Array): boolean {
    const conn = (this as Socket & { [CONNECTION]?: Connection })[CONNECTION]
    try {
      if (conn === undefined) {
        this.destroy()
        return false
      }
      return conn.read((buf as Buffer).subarray(0, n))
    } catch (err) {
      // A handler that threw: the exchange fails with its error, the socket is not reused.
      this.destroy(err as Error)
      return false
    } finally {
      nextRead = conn === undefined ? (buf as Buffer) : conn.nextReadBuffer(buf as Buffer, n)
    }
  },
}

const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/
// A request target is visible ASCII or a byte above it (as undici, but DEL refused too): no space, no control.
const BAD_PATH = /[^\u0021-\u007e\u0080-\u00ff]/
// Framing and hop-by-hop headers are the client's to write, not the caller's.
const REFUSED = new Set(['connection', 'keep-alive', 'transfer-encoding', 'upgrade', 'expect'])
const BODY_METHODS = new Set(['POST', 'PUT', 'PATCH'])

function invalid(message: string): Error {
  return Object.assign(new Error(message), { code: 'UND_ERR_INVALID_ARG' })
}

const LENGTH_MISMATCH = Object.assign(new Error('the request body does not match its content-length'), {
  code: 'UND_ERR_REQ_CONTENT_LENGTH_MISMATCH',
})
const CLOSED = Object.assign(new Error('the upstream client is closed'), { code: 'UND_ERR_CLOSED' })

/** One request and its handler, from dispatch to its end. */
class Exchange {
  readonly handler: UpstreamHandler
  readonly head: string
  readonly body: Buffer | AsyncIterable<Buffer> | Iterable<Buffer> | null
  readonly chunked: boolean
  /** A streamed body's content-length, held to exactly; -1 when chunked or not streamed. */
  length = -1
  readonly headOnly: boolean
  readonly headersTimeout: number
  readonly bodyTimeout: number
  done = false
  /** The whole request (head and body) was handed to the socket. */
  written = false

  constructor(
    handler: UpstreamHandler,
    head: string,
    body: Exchange['body'],
    chunked: boolean,
    opts: UpstreamRequestOptions,
  ) {
    this.handler = handler
    this.head = head
    this.body = body
    this.chunked = chunked
    this.headOnly = opts.method === 'HEAD'
    this.headersTimeout = opts.headersTimeout ?? 300_000
    this.bodyTimeout = opts.bodyTimeout ?? 300_000
  }
}

class OriginPool {
  readonly connectOptions: buildConnector.Options
  readonly idle: Connection[] = []
  readonly queue: Exchange[] = []
  /** Sockets open or opening. */
  count = 0

  constructor(origin: URL) {
    const port = origin.port !== '' ? origin.port : origin.protocol === 'https:' ? '443' : '80'
    this.connectOptions = { hostname: origin.hostname, host: origin.host, protocol: origin.protocol, port }
  }
}

/** The read a handler's onRead is running (see Connection.read). */
let feeding: Connection | null = null
let feedingChunk: Buffer | null = null
function feedOneRead(): void {
  const connection = feeding
  const chunk = feedingChunk
  feeding = null
  feedingChunk = null
  if (connection !== null && chunk !== null) connection.reader.feed(chunk)
}

class Connection implements ResponseSink {
  readonly socket: Socket
  readonly pool: OriginPool
  readonly owner: LeanDispatcher
  readonly reader: ResponseReader
  current: Exchange | null = null
  idleSince = 0
  /** How long this socket may stay idle, as its upstream last said (ms), or -1 for the client's default. */
  keepAliveMs = -1
  #timer: NodeJS.Timeout | null = null
  #timerMs = 0
  #headSeen = false
  readonly #resume = (): void => {
    const ex = this.current
    if (ex === null || ex.done) return
    this.#timer?.refresh()
    this.reader.resume()
    // The reader may have ended the exchange (or paused again) on what it held.
    if (this.current === ex && !this.reader.paused) this.socket.resume()
  }
  readonly #abort = (err?: Error): void => {
    const ex = this.current
    if (ex === null || ex.done) return
    const reason = err ?? Object.assign(new Error('request aborted'), { code: 'UND_ERR_ABORTED' })
    if (this.#connecting) {
      // From inside onConnect: nothing is written yet, so the socket stays good; assign() ends it.
      ex.done = true
      this.#abortedBy = reason
      return
    }
    this.#fail(ex, reason)
  }
  /** Inside the handler's onConnect, and the reason it aborted with, if it did. */
  #connecting = false
  #abortedBy: Error | null = null
  /** Reads in a row that used under an eighth of the read buffer. */
  #smallReads = 0

  constructor(socket: Socket, pool: OriginPool, owner: LeanDispatcher) {
    this.socket = socket
    this.pool = pool
    this.owner = owner
    this.reader = new ResponseReader(this)
    ;(socket as Socket & { [CONNECTION]?: Connection })[CONNECTION] = this
    // Reads come to read() through readIntoOwnBuffer; a socket from a connector without it emits them.
    socket.on('data', (chunk: Buffer) => {
      this.read(chunk)
    })
    socket.on('end', () => {
      if (this.current !== null) this.reader.closed()
      this.destroy()
    })
    socket.on('error', (err) => {
      const ex = this.current
      if (ex !== null && !ex.done) this.#fail(ex, err)
      this.destroy()
    })
    socket.on('close', () => {
      const ex = this.current
      if (ex !== null && !ex.done) {
        this.#fail(ex, Object.assign(new Error('other side closed'), { code: 'UND_ERR_SOCKET' }))
      }
      this.owner.forget(this)
    })
  }

  /** The buffer the socket reads into next, after a read of n bytes into buf (see readIntoOwnBuffer). */
  nextReadBuffer(buf: Buffer, n: number): Buffer {
    const size = buf.length
    if (n === size) {
      this.#smallReads = 0
      return size < READ_BUFFER_MAX ? Buffer.allocUnsafeSlow(Math.min(size * 4, READ_BUFFER_MAX)) : buf
    }
    if (size > READ_BUFFER_MIN && n < size >> 3) {
      if (++this.#smallReads < SMALL_READS_TO_SHRINK) return buf
      this.#smallReads = 0
      return Buffer.allocUnsafeSlow(READ_BUFFER_MIN)
    }
    this.#smallReads = 0
    return buf
  }

  /** A read off the socket; false when it must read no more for now (paused, or closed). */
  read(chunk: Buffer): boolean {
    if (this.current === null) {
      // Nothing was asked: an upstream talking out of turn cannot be trusted with the next request.
      this.destroy()
      return false
    }
    const onRead = this.current.handler.onRead
    if (onRead === undefined) this.reader.feed(chunk)
    else {
      // Through a module slot, not a closure a read: reads never nest (each comes from the event loop).
      feeding = this
      feedingChunk = chunk
      onRead.call(this.current.handler, feedOneRead)
    }
    return !this.socket.isPaused() && !this.socket.destroyed
  }

  get usable(): boolean {
    return !this.socket.destroyed && this.socket.readyState === 'open'
  }

  destroy(): void {
    if (!this.socket.destroyed) this.socket.destroy()
  }

  /** Takes the exchange: tells its handler how to abort, then writes the request. */
  assign(ex: Exchange): void {
    this.current = ex
    this.#headSeen = false
    this.socket.ref()
    this.#connecting = true
    try {
      ex.handler.onConnect?.(this.#abort)
    } finally {
      this.#connecting = false
    }
    if (ex.done) {
      // Aborted before a byte was written: the socket goes to the next request or waits idle.
      const reason = this.#abortedBy!
      this.#abortedBy = null
      this.current = null
      this.owner.exchangeOver()
      this.owner.release(this)
      ex.handler.onError?.(reason)
      return
    }
    this.reader.start(ex.headOnly)
    this.#arm(ex.headersTimeout)
    const body = ex.body
    const socket = this.socket
    if (body === null || Buffer.isBuffer(body)) {
      socket.cork()
      socket.write(ex.head, 'latin1')
      if (body !== null && body.length > 0) socket.write(body)
      socket.uncork()
      ex.written = true
    } else {
      socket.write(ex.head, 'latin1')
      void this.#stream(ex, body)
    }
    // A paused socket (left so by an earlier exchange's backpressure) must read again.
    if (socket.isPaused()) socket.resume()
  }

  async #stream(ex: Exchange, body: AsyncIterable<Buffer> | Iterable<Buffer>): Promise<void> {
    const socket = this.socket
    try {
      let sent = 0
      for await (const chunk of body) {
        if (ex.done || this.current !== ex) return
        // An empty chunk would end a chunked body: it is not written at all.
        if (chunk.length === 0) continue
        sent += chunk.length
        // Past its content-length, the rest would reach the upstream as a request of its own.
        if (ex.length >= 0 && sent > ex.length) throw LENGTH_MISMATCH
        if (ex.chunked) {
          socket.cork()
          socket.write(`${chunk.length.toString(16)}\r\n`, 'latin1')
          socket.write(chunk)
          socket.write('\r\n', 'latin1')
          socket.uncork()
        } else socket.write(chunk)
        if (socket.writableNeedDrain) await drained(socket)
      }
      if (ex.done || this.current !== ex) return
      // Short of it, the upstream would wait for bytes that never come.
      if (ex.length >= 0 && sent !== ex.length) throw LENGTH_MISMATCH
      if (ex.chunked) socket.write('0\r\n\r\n', 'latin1')
      ex.written = true
    } catch (err) {
      if (!ex.done && this.current === ex) this.#fail(ex, err as Error)
    }
  }

  #arm(ms: number): void {
    if (ms <= 0) {
      // 0 is no timeout, as undici reads it: the timer of an earlier request on this socket goes.
      if (this.#timer !== null) clearTimeout(this.#timer)
      this.#timer = null
      return
    }
    if (this.#timer !== null && this.#timerMs === ms) {
      this.#timer.refresh()
      return
    }
    if (this.#timer !== null) clearTimeout(this.#timer)
    this.#timerMs = ms
    // One timer per socket, refreshed by each request and each body chunk: none made per call.
    this.#timer = setTimeout(this.#onTimer, ms)
    this.#timer.unref()
  }

  readonly #onTimer = (): void => {
    const ex = this.current
    // Held back by its handler (a slow client, a receipt being made): as undici, no timeout while paused;
    // resume() arms the timer again.
    if (ex === null || ex.done || this.reader.paused) return
    const err = this.#headSeen
      ? Object.assign(new Error('body timeout'), { code: 'UND_ERR_BODY_TIMEOUT' })
      : Object.assign(new Error('headers timeout'), { code: 'UND_ERR_HEADERS_TIMEOUT' })
    this.#fail(ex, err)
  }

  #fail(ex: Exchange, err: Error): void {
    ex.done = true
    this.current = null
    this.destroy()
    this.owner.exchangeOver()
    ex.handler.onError?.(err)
  }

  // ResponseSink -------------------------------------------------------------------------------------

  head(status: number, raw: Buffer[]): boolean {
    const ex = this.current!
    if (status >= 200) {
      this.#headSeen = true
      if (ex.bodyTimeout !== ex.headersTimeout) this.#arm(ex.bodyTimeout)
      else this.#timer?.refresh()
    }
    const more = ex.handler.onHeaders?.(status, raw, this.#resume) ?? true
    if (ex.done) return false
    if (!more) this.socket.pause()
    return more
  }

  body(chunk: Buffer): boolean {
    const ex = this.current!
    this.#timer?.refresh()
    const more = ex.handler.onData?.(chunk) ?? true
    if (ex.done) return false
    if (!more) this.socket.pause()
    return more
  }

  end(reusable: boolean): void {
    const ex = this.current!
    ex.done = true
    this.current = null
    this.owner.exchangeOver()
    // An answer that came before the whole request was sent leaves the socket mid-request.
    if (reusable && ex.written) {
      const seconds = this.reader.keepAliveSeconds
      this.owner.release(this, seconds >= 0 ? Math.max(0, seconds * 1000 - KEEP_ALIVE_MARGIN_MS) : -1)
    } else this.destroy()
    ex.handler.onComplete?.(null)
  }

  error(err: Error): void {
    const ex = this.current
    if (ex !== null && !ex.done) this.#fail(ex, err)
    else this.destroy()
  }
}

function drained(socket: Socket): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      socket.off('drain', done)
      socket.off('close', done)
      resolve()
    }
    socket.on('drain', done)
    socket.on('close', done)
  })
}

export class LeanDispatcher {
  /** The policy its sockets enforce; proxy() refuses a target that asks for stricter than this. */
  readonly allowPrivate: boolean
  readonly #connect: buildConnector.connector
  readonly #max: number
  readonly #keepAliveMs: number
  readonly #pools = new Map<string, OriginPool>()
  readonly #sweep: NodeJS.Timeout
  #busy = 0
  #closed = false
  #whenIdle: (() => void) | null = null

  constructor(options: LeanDispatcherOptions) {
    this.#connect = options.connect
    this.allowPrivate = options.allowPrivate
    this.#max = options.connections ?? Number.POSITIVE_INFINITY
    this.#keepAliveMs = options.keepAliveMs ?? KEEP_ALIVE_MS
    this.#sweep = setInterval(() => this.#expireIdle(Date.now()), SWEEP_MS)
    this.#sweep.unref()
  }

  dispatch(opts: Dispatcher.DispatchOptions, handler: Dispatcher.DispatchHandler): boolean {
    return this.#dispatch(opts as UpstreamRequestOptions, handler as UpstreamHandler)
  }

  #dispatch(opts: UpstreamRequestOptions, handler: UpstreamHandler): boolean {
    if (this.#closed) {
      handler.onError?.(CLOSED)
      return false
    }
    let ex: Exchange
    let pool: OriginPool
    try {
      ex = prepare(opts, handler)
      pool = this.#pool(opts.origin)
    } catch (err) {
      handler.onError?.(err as Error)
      return true
    }
    this.#busy++
    this.#take(pool, ex)
    return true
  }

  #pool(origin: string | URL | undefined): OriginPool {
    if (origin === undefined) throw invalid('origin is required')
    const key = typeof origin === 'string' ? origin : origin.origin
    let pool = this.#pools.get(key)
    if (pool === undefined) {
      const url = typeof origin === 'string' ? new URL(origin) : origin
      if (url.protocol !== 'http:' && url.protocol !== 'https:') throw invalid('origin must be http or https')
      pool = new OriginPool(url)
      this.#pools.set(key, pool)
    }
    return pool
  }

  #take(pool: OriginPool, ex: Exchange): void {
    const now = Date.now()
    while (pool.idle.length > 0) {
      const conn = pool.idle.pop()!
      if (conn.usable && now - conn.idleSince < this.#idleLimit(conn)) {
        conn.assign(ex)
        return
      }
      conn.destroy()
    }
    if (pool.count < this.#max) this.#open(pool, ex)
    else pool.queue.push(ex)
  }

  #open(pool: OriginPool, ex: Exchange): void {
    pool.count++
    this.#connect(pool.connectOptions, (err, socket) => {
      if (err !== null || socket === null) {
        pool.count--
        this.exchangeOver()
        ex.done = true
        ex.handler.onError?.(err ?? new Error('connect failed'))
        this.#next(pool)
        return
      }
      // Not aborted meanwhile: the abort is handed to the handler only by assign().
      new Connection(socket, pool, this).assign(ex)
    })
  }

  /** The next queued exchange of a pool, on a slot that came free. */
  #next(pool: OriginPool): void {
    const ex = pool.queue.shift()
    if (ex !== undefined) this.#take(pool, ex)
  }

  #idleLimit(conn: Connection): number {
    return conn.keepAliveMs >= 0 ? Math.min(conn.keepAliveMs, this.#keepAliveMs) : this.#keepAliveMs
  }

  /** An exchange ended on conn (conn still good): the socket goes to the next one or waits idle. */
  release(conn: Connection, keepAliveMs = -1): void {
    const pool = conn.pool
    if (keepAliveMs >= 0) conn.keepAliveMs = keepAliveMs
    if (this.#closed || keepAliveMs === 0) {
      conn.destroy()
    } else {
      // A queued exchange cannot have ended: its handler gets the abort only once it is assigned.
      const next = pool.queue.shift()
      if (next !== undefined) {
        conn.assign(next)
      } else {
        conn.idleSince = Date.now()
        conn.socket.unref()
        if (conn.socket.isPaused()) conn.socket.resume()
        pool.idle.push(conn)
      }
    }
  }

  /** A socket closed: it leaves its pool; a queued exchange may now open one. */
  forget(conn: Connection): void {
    const pool = conn.pool
    pool.count--
    const at = pool.idle.indexOf(conn)
    if (at >= 0) pool.idle.splice(at, 1)
    this.#next(pool)
  }

  /** Called once per exchange when it is over, whichever way: close() waits for none to be left. */
  exchangeOver(): void {
    this.#busy--
    if (this.#busy === 0 && this.#whenIdle !== null) this.#whenIdle()
  }

  #expireIdle(now: number): void {
    for (const pool of this.#pools.values()) {
      for (let i = pool.idle.length - 1; i >= 0; i--) {
        const conn = pool.idle[i]!
        if (now - conn.idleSince >= this.#idleLimit(conn)) conn.destroy()
      }
    }
  }

  /** Stops taking requests, lets those in flight finish, closes every socket. */
  async close(): Promise<void> {
    this.#closed = true
    clearInterval(this.#sweep)
    for (const pool of this.#pools.values()) for (const conn of pool.idle) conn.destroy()
    if (this.#busy > 0) await new Promise<void>((resolve) => (this.#whenIdle = resolve))
  }
}

/** Validates a request and writes its head once: method, target, headers, framing. */
function prepare(opts: UpstreamRequestOptions, handler: UpstreamHandler): Exchange {
  const method = opts.method
  if (!TOKEN.test(method)) throw invalid('invalid method')
  const path = opts.path
  if (path.charCodeAt(0) !== 47 || BAD_PATH.test(path)) throw invalid('invalid request path')
  let head = `${method} ${path} HTTP/1.1\r\n`
  let length = -1
  let hasHost = false
  const headers = opts.headers
  if (headers != null) {
    for (let i = 0; i < headers.length; i += 2) {
      const name = headers[i]!
      const value = headers[i + 1]!
      if (!TOKEN.test(name) || breaksLine(value)) throw invalid(`invalid header ${name}`)
      const lower = name.toLowerCase()
      if (REFUSED.has(lower)) throw invalid(`invalid ${lower} header`)
      if (lower === 'content-length') {
        if (!/^\d{1,15}$/.test(value)) throw invalid('invalid content-length header')
        length = Number(value)
        continue
      }
      if (lower === 'host') hasHost = true
      head += `${name}: ${value}\r\n`
    }
  }
  if (!hasHost) throw invalid('a host header is required')
  let body = opts.body ?? null
  if (typeof body === 'string') body = Buffer.from(body)
  else if (body instanceof Uint8Array && !Buffer.isBuffer(body))
    body = Buffer.from(body.buffer, body.byteOffset, body.byteLength)
  let chunked = false
  if (body === null) {
    if (length >= 0) head += `content-length: ${length}\r\n`
    else if (BODY_METHODS.has(method)) head += 'content-length: 0\r\n'
  } else if (Buffer.isBuffer(body)) {
    if (length >= 0 && length !== body.length) throw invalid('content-length does not match the body')
    head += `content-length: ${body.length}\r\n`
  } else if (length >= 0) {
    head += `content-length: ${length}\r\n`
  } else {
    head += 'transfer-encoding: chunked\r\n'
    chunked = true
  }
  const ex = new Exchange(handler, `${head}\r\n`, body as Exchange['body'], chunked, opts)
  if (body !== null && !Buffer.isBuffer(body) && !chunked) ex.length = length
  return ex
}

/** A CR, LF or NUL in a header value would end its line early: a request smuggled inside another. */
function breaksLine(value: string): boolean {
  for (let i = 0; i < value.length; i++) {
    const c = value.charCodeAt(i)
    if (c === 13 || c === 10 || c === 0) return true
  }
  return false
}
