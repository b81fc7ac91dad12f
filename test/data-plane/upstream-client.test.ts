// tollgate's own HTTP/1.1 upstream client (LeanDispatcher and its ResponseReader) on real loopback sockets:
// a node:net server writes hand-made responses, byte for byte and split across writes where it matters, so
// the framing, reuse, timeout and backpressure rules are checked on what a socket really delivers.
import { execFileSync } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { createServer, type Server, type Socket } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { createServer as createTlsServer } from 'node:tls'
import { buildConnector, type Dispatcher } from 'undici'
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest'
import { LeanDispatcher, readIntoOwnBuffer } from '../../src/data-plane/upstream-client/lean-dispatcher.ts'
import { createUpstreamDispatcher, type UpstreamDispatcher } from '../../src/data-plane/upstream-pool.ts'
import { waitFor } from '../helpers/wait-for.ts'

/** One request as the server read it off the wire. */
interface SeenRequest {
  conn: SeenConnection
  method: string
  path: string
  /** Lower-case names; every value a name had, in order. */
  headers: Map<string, string[]>
  /** Decoded when the request was chunked. */
  body: Buffer
}

interface SeenConnection {
  id: number
  socket: Socket
  received: Buffer[]
  closed: boolean
  pending: Buffer
  /** Answers go out one at a time, in request order. */
  turn: Promise<void>
}

type Responder = (req: SeenRequest, socket: Socket) => void | Promise<void>

let server: Server
let port: number
let origin: string
let connections: SeenConnection[] = []
let requests: SeenRequest[] = []
let respond: Responder
let d: UpstreamDispatcher
/** Server connections are numbered from 1 in each test. */
let nextId = 1

const OK: Responder = (_req, socket) => {
  socket.write('HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok')
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms))
}

/** Writes each piece on its own, with a pause between, so that the client reads them apart. */
async function dribble(socket: Socket, pieces: Array<string | Buffer>, gapMs = 3): Promise<void> {
  for (const piece of pieces) {
    if (socket.destroyed) return
    socket.write(piece)
    await sleep(gapMs)
  }
}

/** The decoded body of a chunked request starting at from, and where it ends; null if not all here. */
function decodeChunked(buf: Buffer, from: number): { body: Buffer; next: number } | null {
  const parts: Buffer[] = []
  let at = from
  for (;;) {
    const eol = buf.indexOf('\r\n', at)
    if (eol < 0) return null
    const size = Number.parseInt(buf.toString('latin1', at, eol).split(';')[0]!, 16)
    at = eol + 2
    if (size === 0) break
    if (buf.length < at + size + 2) return null
    parts.push(buf.subarray(at, at + size))
    at += size + 2
  }
  for (;;) {
    const eol = buf.indexOf('\r\n', at)
    if (eol < 0) return null
    const empty = eol === at
    at = eol + 2
    if (empty) return { body: Buffer.concat(parts), next: at }
  }
}

function readRequests(conn: SeenConnection): void {
  for (;;) {
    const buf = conn.pending
    const end = buf.indexOf('\r\n\r\n')
    if (end < 0) return
    const head = buf.toString('latin1', 0, end)
    const [requestLine, ...lines] = head.split('\r\n')
    const [method, path] = requestLine!.split(' ')
    const headers = new Map<string, string[]>()
    for (const line of lines) {
      const colon = line.indexOf(':')
      const name = line.slice(0, colon).toLowerCase()
      headers.set(name, [...(headers.get(name) ?? []), line.slice(colon + 1).trim()])
    }
    let body: Buffer
    let next: number
    if (headers.get('transfer-encoding')?.[0] === 'chunked') {
      const decoded = decodeChunked(buf, end + 4)
      if (decoded === null) return
      body = decoded.body
      next = decoded.next
    } else {
      const length = Number(headers.get('content-length')?.[0] ?? 0)
      if (buf.length < end + 4 + length) return
      body = buf.subarray(end + 4, end + 4 + length)
      next = end + 4 + length
    }
    conn.pending = buf.subarray(next)
    const req: SeenRequest = { conn, method: method!, path: path!, headers, body }
    requests.push(req)
    const responder = respond
    conn.turn = conn.turn.then(() => responder(req, conn.socket)).catch(() => {})
  }
}

/** What a dispatch came to, as the handler saw it. */
interface Outcome {
  status: number
  /** Statuses of interim (1xx) heads, in order. */
  interim: number[]
  /** Lower-case names of the final head. */
  headers: Map<string, string[]>
  body: Buffer
  chunks: Buffer[]
  completed: boolean
  error: (Error & { code?: string }) | null
  /** Every handler call in order: 'connect', 'headers:200', 'data', 'complete', 'error:CODE'. */
  events: string[]
}

interface CallOptions {
  method?: string
  path?: string
  /** Beyond host, which is always sent. */
  headers?: string[]
  body?: Buffer | AsyncIterable<Buffer> | null
  headersTimeout?: number
  bodyTimeout?: number
  dispatcher?: UpstreamDispatcher
  /** Another upstream than the test's server. */
  origin?: string
  onConnect?(abort: (err?: Error) => void): void
  /** Returning false pauses the response, as with undici. */
  onHeaders?(status: number, resume: () => void, raw: Buffer[]): boolean | undefined
  onData?(chunk: Buffer, resume: () => void): boolean | undefined
  /** The handler's own wrap of each read (the proxy corks around it); absent, the handler has none. */
  onRead?(feed: () => void): void
}

/** Dispatches one request; resolves on onComplete or onError (fails fast if neither comes). */
function call(options: CallOptions = {}): { done: Promise<Outcome>; outcome: Outcome } {
  const outcome: Outcome = {
    status: 0,
    interim: [],
    headers: new Map(),
    body: Buffer.alloc(0),
    chunks: [],
    completed: false,
    error: null,
    events: [],
  }
  let settle!: () => void
  const settled = new Promise<void>((resolve) => (settle = resolve))
  let resumeFn: () => void = () => {}
  const handler: Dispatcher.DispatchHandler = {
    onConnect(abort) {
      outcome.events.push('connect')
      options.onConnect?.(abort)
    },
    onHeaders(status, raw, resume) {
      outcome.events.push(`headers:${status}`)
      if (status < 200) {
        outcome.interim.push(status)
        return true
      }
      outcome.status = status
      for (let i = 0; i < raw.length; i += 2) {
        const name = raw[i]!.toString('latin1').toLowerCase()
        outcome.headers.set(name, [...(outcome.headers.get(name) ?? []), raw[i + 1]!.toString('latin1')])
      }
      resumeFn = resume
      return options.onHeaders?.(status, resume, raw as Buffer[]) ?? true
    },
    onData(chunk) {
      outcome.events.push('data')
      // A copy: the client hands out views of its reads, which is fine, but the test keeps them past the call.
      outcome.chunks.push(Buffer.from(chunk))
      return options.onData?.(chunk, resumeFn) ?? true
    },
    onComplete() {
      outcome.events.push('complete')
      outcome.completed = true
      outcome.body = Buffer.concat(outcome.chunks)
      settle()
    },
    onError(err) {
      outcome.error = err as Outcome['error']
      outcome.events.push(`error:${outcome.error!.code ?? err.message}`)
      outcome.body = Buffer.concat(outcome.chunks)
      settle()
    },
  }
  if (options.onRead !== undefined) {
    const onRead = options.onRead
    ;(handler as { onRead?(feed: () => void): void }).onRead = (feed) => onRead(feed)
  }
  const target = options.origin ?? origin
  const dispatchOptions = {
    origin: target,
    path: options.path ?? '/',
    method: options.method ?? 'GET',
    headers: ['host', new URL(target).host, ...(options.headers ?? [])],
    body: options.body ?? null,
    headersTimeout: options.headersTimeout ?? 2_000,
    bodyTimeout: options.bodyTimeout ?? 2_000,
  }
  ;(options.dispatcher ?? d).dispatch(dispatchOptions as unknown as Dispatcher.DispatchOptions, handler)
  const done = Promise.race([
    settled.then(() => outcome),
    sleep(3_000).then(() => {
      throw new Error(`no onComplete or onError; events: ${outcome.events.join(', ')}`)
    }),
  ])
  return { done, outcome }
}

async function get(options: CallOptions = {}): Promise<Outcome> {
  return call(options).done
}

/** The ids of the server connections the requests so far came on, in order. */
function connectionIds(): number[] {
  return requests.map((r) => r.conn.id)
}

/** The next request, answered plainly, completes whole, and the requests so far came on these connections. */
async function expectNextOkOn(ids: number[]): Promise<void> {
  respond = OK
  const next = await get()
  expect(next.completed).toBe(true)
  expect(next.body.toString()).toBe('ok')
  expect(connectionIds()).toEqual(ids)
}

beforeAll(async () => {
  server = createServer((socket) => {
    socket.setNoDelay(true)
    const conn: SeenConnection = {
      id: nextId++,
      socket,
      received: [],
      closed: false,
      pending: Buffer.alloc(0),
      turn: Promise.resolve(),
    }
    connections.push(conn)
    socket.on('data', (chunk: Buffer) => {
      conn.received.push(chunk)
      conn.pending = Buffer.concat([conn.pending, chunk])
      readRequests(conn)
    })
    socket.on('error', () => {})
    socket.on('close', () => {
      conn.closed = true
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  port = (server.address() as { port: number }).port
  origin = `http://127.0.0.1:${port}`
})

afterAll(async () => {
  await new Promise<void>((resolve) => server.close(() => resolve()))
})

beforeEach(() => {
  connections = []
  requests = []
  nextId = 1
  respond = OK
  d = createUpstreamDispatcher({ allowPrivate: true })
})

afterEach(async () => {
  // The server's sockets first: an exchange a failed test left hanging then ends, and close() does not wait on it.
  for (const conn of connections) conn.socket.destroy()
  await d.close()
})

describe('LeanDispatcher on real sockets', () => {
  it('is the default upstream client', () => {
    expect(d).toBeInstanceOf(LeanDispatcher)
  })

  describe('response framing', () => {
    it('reads a content-length body split across many writes, its head split mid-line', async () => {
      const body = Buffer.from('the quick brown fox jumps over the lazy dog')
      respond = (_req, socket) =>
        dribble(socket, [
          'HTTP/1.1 200 OK\r\ncont',
          `ent-length: ${body.length}\r\nx-one: fi`,
          'rst\r',
          '\nx-two: second\r\n\r',
          '\n',
          ...Array.from({ length: body.length }, (_, i) => body.subarray(i, i + 1)),
        ])
      const out = await get()
      expect(out.error).toBeNull()
      expect(out.completed).toBe(true)
      expect(out.status).toBe(200)
      expect(out.headers.get('x-one')).toEqual(['first'])
      expect(out.headers.get('x-two')).toEqual(['second'])
      expect(out.body.equals(body)).toBe(true)
      // The split really reached the client: else this case tests nothing beyond one read.
      expect(out.chunks.length).toBeGreaterThan(5)
      expect(out.events.at(-1)).toBe('complete')
    })

    it('reads a chunked body with split sizes, extensions, trailers and a split last chunk', async () => {
      const alphabet = 'abcdefghijklmnopqrstuvwxyz'
      respond = (_req, socket) =>
        dribble(socket, [
          'HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n',
          '5;ext=1\r',
          '\nhel',
          'lo\r\n',
          // 0x1a = 26, its two digits in two reads, then a quoted extension.
          '1',
          'a;name="v"\r\n',
          alphabet.slice(0, 10),
          alphabet.slice(10),
          '\r',
          '\n0',
          '\r',
          '\nx-trailer: t\r\n',
          'x-other: u\r',
          '\n\r',
          '\n',
        ])
      const out = await get()
      expect(out.error).toBeNull()
      expect(out.completed).toBe(true)
      expect(out.body.toString()).toBe('hello' + alphabet)
      expect(out.chunks.length).toBeGreaterThan(2)
      // The whole answer, trailers included, was read and no more: the socket carries the next request.
      await expectNextOkOn([1, 1])
    })

    it('reads a chunked answer that came in one read', async () => {
      respond = (_req, socket) => {
        socket.write('HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n')
      }
      const out = await get()
      expect(out.body.toString()).toBe('abcde')
      const next = await get()
      expect(next.completed).toBe(true)
      expect(connectionIds()).toEqual([1, 1])
    })

    it("runs every callback of a read inside the handler's onRead, once a read", async () => {
      let inRead = false
      const reads: string[][] = []
      const outside: string[] = []
      let firstRead!: () => void
      const firstReadDone = new Promise<void>((resolve) => (firstRead = resolve))
      respond = async (_req, socket) => {
        // Two writes, the second only once the first was read: two reads, whatever the machine's load.
        socket.write('HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n')
        await firstReadDone
        socket.write('1\r\nf\r\n1\r\ng\r\n0\r\n\r\n')
      }
      const { done, outcome } = call({
        onRead(feed) {
          const before = outcome.events.length
          inRead = true
          feed()
          inRead = false
          reads.push(outcome.events.slice(before))
          firstRead()
        },
        onHeaders: () => {
          if (!inRead) outside.push('headers')
          return true
        },
        onData: () => {
          if (!inRead) outside.push('data')
          return true
        },
      })
      const out = await done
      expect(out.body.toString()).toBe('abcdefg')
      // The head and the first two chunks came in one read, the rest and the end in the next.
      expect(reads).toEqual([
        ['headers:200', 'data', 'data'],
        ['data', 'data', 'complete'],
      ])
      expect(outside).toEqual([])
    })

    it('refuses an answer with both content-length and transfer-encoding, and drops its socket', async () => {
      respond = (_req, socket) => {
        socket.write(
          'HTTP/1.1 200 OK\r\ncontent-length: 5\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n',
        )
      }
      const out = await get()
      expect(out.error?.code).toBe('UND_ERR_SOCKET')
      expect(out.completed).toBe(false)
      expect(out.events).not.toContain('complete')
      expect(out.events).not.toContain('data')
      await expectNextOkOn([1, 2])
      await sleep(20)
      expect(out.events.filter((e) => e === 'complete' || e.startsWith('error'))).toHaveLength(1)
    })

    it('refuses two content-lengths that differ', async () => {
      respond = (_req, socket) => {
        socket.write('HTTP/1.1 200 OK\r\ncontent-length: 5\r\ncontent-length: 6\r\n\r\nhello!')
      }
      const twoLines = await get()
      expect(twoLines.error?.code).toBe('UND_ERR_SOCKET')
      expect(twoLines.completed).toBe(false)
      respond = (_req, socket) => {
        socket.write('HTTP/1.1 200 OK\r\ncontent-length: 5, 6\r\n\r\nhello!')
      }
      const oneList = await get()
      expect(oneList.error?.code).toBe('UND_ERR_SOCKET')
      expect(oneList.completed).toBe(false)
    })

    it('takes two content-lengths that agree, on one line or two', async () => {
      respond = (_req, socket) => {
        socket.write('HTTP/1.1 200 OK\r\ncontent-length: 5, 5\r\n\r\nhello')
      }
      const list = await get()
      expect(list.error).toBeNull()
      expect(list.body.toString()).toBe('hello')
      respond = (_req, socket) => {
        socket.write('HTTP/1.1 200 OK\r\ncontent-length: 5\r\nContent-Length: 5\r\n\r\nworld')
      }
      const lines = await get()
      expect(lines.error).toBeNull()
      expect(lines.body.toString()).toBe('world')
      // Both were whole answers: the socket stays good.
      expect(connectionIds()).toEqual([1, 1])
    })

    it('refuses a malformed chunk size', async () => {
      respond = (_req, socket) =>
        dribble(socket, [
          'HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n',
          'zz\r\n',
          'hello\r\n0\r\n\r\n',
        ])
      const out = await get()
      expect(out.error?.code).toBe('UND_ERR_SOCKET')
      expect(out.completed).toBe(false)
      expect(out.chunks).toHaveLength(0)
    })

    it('refuses chunk data longer than its size', async () => {
      respond = (_req, socket) => {
        socket.write('HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nhello\r\n0\r\n\r\n')
      }
      const out = await get()
      expect(out.error?.code).toBe('UND_ERR_SOCKET')
      expect(out.completed).toBe(false)
      await expectNextOkOn([1, 2])
    })

    it('refuses a control character in the status line or a header value', async () => {
      for (const head of [
        'HTTP/1.1 200 O\x00K\r\ncontent-length: 2\r\n\r\nok',
        'HTTP/1.1 200 OK\r\nx-a: a\rb\r\ncontent-length: 2\r\n\r\nok',
        'HTTP/1.1 200 OK\r\nx-a: a\x01b\r\ncontent-length: 2\r\n\r\nok',
      ]) {
        respond = (_req, socket) => {
          socket.write(head)
        }
        const out = await get()
        expect(out.error?.code, JSON.stringify(head)).toBe('UND_ERR_SOCKET')
        expect(out.completed).toBe(false)
      }
      // A tab is allowed inside a value.
      respond = (_req, socket) => {
        socket.write('HTTP/1.1 200 OK\r\nx-a: a\tb\r\ncontent-length: 2\r\n\r\nok')
      }
      const tab = await get()
      expect(tab.headers.get('x-a')).toEqual(['a\tb'])
      expect(tab.body.toString()).toBe('ok')
    })

    it('reads a body delimited by the close of the connection, and does not reuse it', async () => {
      const pieces = ['first ', 'second ', 'third']
      respond = async (_req, socket) => {
        await dribble(socket, ['HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\n\r\n', ...pieces])
        socket.end()
      }
      const out = await get()
      expect(out.error).toBeNull()
      expect(out.completed).toBe(true)
      expect(out.body.toString()).toBe(pieces.join(''))
      await expectNextOkOn([1, 2])
    })

    it('reads no body for 204, 304 and HEAD, and reuses the socket after each', async () => {
      respond = (req, socket) => {
        if (req.path === '/204') socket.write('HTTP/1.1 204 No Content\r\nx-a: 1\r\n\r\n')
        else if (req.path === '/304') socket.write('HTTP/1.1 304 Not Modified\r\ncontent-length: 10\r\n\r\n')
        else if (req.method === 'HEAD') socket.write('HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\n')
        else socket.write(`HTTP/1.1 200 OK\r\ncontent-length: ${req.path.length}\r\n\r\n${req.path}`)
      }
      for (const [options, status] of [
        [{ path: '/204' }, 204],
        [{ path: '/304' }, 304],
        [{ path: '/head', method: 'HEAD' }, 200],
      ] as const) {
        const out = await get(options)
        expect(out.error).toBeNull()
        expect(out.status).toBe(status)
        expect(out.completed).toBe(true)
        expect(out.chunks).toHaveLength(0)
        // Had the client waited for a body, the next answer's bytes would have been taken for it.
        const next = await get({ path: '/after' })
        expect(next.body.toString()).toBe('/after')
      }
      expect(new Set(connectionIds())).toEqual(new Set([1]))
    })

    it('delivers the final head after interim 100 and 103 heads', async () => {
      respond = (_req, socket) =>
        dribble(socket, [
          'HTTP/1.1 100 Continue\r\n\r\n',
          'HTTP/1.1 103 Early Hints\r\nlink: </a.css>; rel=preload\r\n\r\nHTTP/1.1 2',
          '01 Created\r\ncontent-length: 4\r\n\r\nbo',
          'dy',
        ])
      const out = await get()
      expect(out.error).toBeNull()
      expect(out.interim).toEqual([100, 103])
      expect(out.status).toBe(201)
      expect(out.headers.has('link')).toBe(false)
      expect(out.body.toString()).toBe('body')
      respond = (_req, socket) => {
        socket.write('HTTP/1.1 103 Early Hints\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: 3\r\n\r\nabc')
      }
      const oneRead = await get()
      expect(oneRead.interim).toEqual([103])
      expect(oneRead.status).toBe(200)
      expect(oneRead.body.toString()).toBe('abc')
      expect(connectionIds()).toEqual([1, 1])
    })
  })

  describe('keep-alive', () => {
    it('sends sequential requests to one origin on one socket', async () => {
      for (let i = 0; i < 3; i++) expect((await get()).body.toString()).toBe('ok')
      expect(connections).toHaveLength(1)
      expect(connectionIds()).toEqual([1, 1, 1])
    })

    it('opens a new socket after an answer with connection: close', async () => {
      respond = (_req, socket) => {
        // The server keeps its end open: the client must not count on seeing the close.
        socket.write('HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 2\r\n\r\nok')
      }
      expect((await get()).completed).toBe(true)
      await expectNextOkOn([1, 2])
      await waitFor(() => connections[0]!.closed, { timeoutMs: 1_000, what: 'the first socket closed' })
    })

    it('opens a new socket after an HTTP/1.0 answer, or one the upstream keeps for under a second', async () => {
      respond = (_req, socket) => {
        socket.write('HTTP/1.0 200 OK\r\ncontent-length: 2\r\n\r\nok')
      }
      expect((await get()).completed).toBe(true)
      respond = (_req, socket) => {
        socket.write('HTTP/1.1 200 OK\r\nkeep-alive: timeout=1\r\ncontent-length: 2\r\n\r\nok')
      }
      expect((await get()).completed).toBe(true)
      await expectNextOkOn([1, 2, 3])
    })

    it('does not reuse a socket that sent bytes after a complete answer', async () => {
      respond = (_req, socket) => {
        socket.write(
          'HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nokHTTP/1.1 200 OK\r\ncontent-length: 3\r\n\r\nbad',
        )
      }
      const out = await get()
      expect(out.completed).toBe(true)
      expect(out.body.toString()).toBe('ok')
      await expectNextOkOn([1, 2])
    })

    it('drops an idle socket the upstream writes to out of turn', async () => {
      respond = async (_req, socket) => {
        socket.write('HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok')
        await sleep(30)
        socket.write('HTTP/1.1 200 OK\r\ncontent-length: 3\r\n\r\nbad')
      }
      expect((await get()).body.toString()).toBe('ok')
      await waitFor(() => connections[0]!.closed, { timeoutMs: 1_000, what: 'the spoiled socket closed' })
      await expectNextOkOn([1, 2])
    })
  })

  describe('timeouts and failures', () => {
    it('times out waiting for the head', async () => {
      respond = () => {}
      const started = Date.now()
      const out = await get({ headersTimeout: 200 })
      expect(out.error?.code).toBe('UND_ERR_HEADERS_TIMEOUT')
      expect(out.events).toEqual(['connect', 'error:UND_ERR_HEADERS_TIMEOUT'])
      expect(Date.now() - started).toBeGreaterThanOrEqual(150)
      await waitFor(() => connections[0]!.closed, { timeoutMs: 1_000, what: 'the timed-out socket closed' })
    })

    it('times out when the body stalls', async () => {
      respond = (_req, socket) => {
        socket.write('HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nabc')
      }
      const out = await get({ headersTimeout: 2_000, bodyTimeout: 200 })
      expect(out.error?.code).toBe('UND_ERR_BODY_TIMEOUT')
      expect(out.completed).toBe(false)
      expect(out.body.toString()).toBe('abc')
      await waitFor(() => connections[0]!.closed, { timeoutMs: 1_000, what: 'the timed-out socket closed' })
    })

    it('lets a body that keeps coming outlast its body timeout', async () => {
      respond = (_req, socket) =>
        dribble(socket, ['HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\n', 'a', 'b', 'c', 'd', 'e'], 80)
      const out = await get({ headersTimeout: 200, bodyTimeout: 200 })
      expect(out.error).toBeNull()
      expect(out.body.toString()).toBe('abcde')
    })

    it('reads a timeout of 0 as none, also after a timed request on the same socket', async () => {
      expect((await get({ headersTimeout: 200, bodyTimeout: 200 })).completed).toBe(true)
      respond = (_req, socket) =>
        dribble(socket, ['HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n', 'a', 'b'], 300)
      const out = await get({ headersTimeout: 0, bodyTimeout: 0 })
      expect(out.error).toBeNull()
      expect(out.body.toString()).toBe('ab')
      expect(connectionIds()).toEqual([1, 1])
    })

    it('does not time out a response its handler has paused', async () => {
      // As undici: the body timeout is the upstream's silence, not the time the caller takes to read.
      respond = (_req, socket) => {
        socket.write('HTTP/1.1 200 OK\r\ncontent-length: 6\r\n\r\nabc')
        setTimeout(() => socket.write('def'), 20)
      }
      const out = await get({
        bodyTimeout: 150,
        onData(_chunk, resume) {
          setTimeout(resume, 400)
          return false
        },
      })
      expect(out.error).toBeNull()
      expect(out.body.toString()).toBe('abcdef')
    })

    it('fails a body the upstream cuts short, and never completes it', async () => {
      respond = async (_req, socket) => {
        await dribble(socket, ['HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\n', 'abc'])
        socket.end()
      }
      const out = await get()
      expect(['UND_ERR_SOCKET', 'ECONNRESET']).toContain(out.error?.code)
      expect(out.body.toString()).toBe('abc')
      await sleep(20)
      expect(out.events).not.toContain('complete')
    })

    it('fails a chunked body the upstream resets', async () => {
      respond = async (_req, socket) => {
        await dribble(socket, ['HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n', '3\r\nabc\r\n'])
        socket.resetAndDestroy()
      }
      const out = await get()
      expect(['UND_ERR_SOCKET', 'ECONNRESET']).toContain(out.error?.code)
      await sleep(20)
      expect(out.events).not.toContain('complete')
    })

    it('reports a refused connection with its errno code', async () => {
      const closed = createServer()
      await new Promise<void>((resolve) => closed.listen(0, '127.0.0.1', resolve))
      const deadPort = (closed.address() as { port: number }).port
      await new Promise<void>((resolve) => closed.close(() => resolve()))
      const saved = origin
      origin = `http://127.0.0.1:${deadPort}`
      try {
        const out = await get()
        expect(out.error?.code).toBe('ECONNREFUSED')
        expect(out.events).toEqual(['error:ECONNREFUSED'])
      } finally {
        origin = saved
      }
      expect((await get()).body.toString()).toBe('ok')
    })

    it('fails a request whose head the upstream never finishes', async () => {
      respond = async (_req, socket) => {
        await dribble(socket, ['HTTP/1.1 200 OK\r\ncontent-le'])
        socket.end()
      }
      const out = await get()
      expect(out.error?.code).toBe('UND_ERR_SOCKET')
      expect(out.events).toEqual(['connect', 'error:UND_ERR_SOCKET'])
    })
  })

  describe('backpressure', () => {
    it('sends no data while paused by onData, then all of it in order', async () => {
      const pieces = Array.from({ length: 10 }, (_, i) => Buffer.alloc(1000, 97 + i))
      const chunked = (part: Buffer) => Buffer.concat([Buffer.from('3e8\r\n'), part, Buffer.from('\r\n')])
      const framings: Record<string, Responder> = {
        // The rest comes in later reads: a paused socket must not hand them on.
        length: (_req, socket) =>
          dribble(socket, ['HTTP/1.1 200 OK\r\ncontent-length: 10000\r\n\r\n', ...pieces]),
        // Five chunks in the first read: the four after the paused one are held by the reader, not dropped.
        chunked: (_req, socket) =>
          dribble(socket, [
            Buffer.concat([
              Buffer.from('HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n'),
              ...pieces.slice(0, 5).map(chunked),
            ]),
            ...pieces.slice(5).map(chunked),
            '0\r\n\r\n',
          ]),
      }
      for (const [name, responder] of Object.entries(framings)) {
        respond = responder
        let paused = false
        let pauses = 0
        let dataWhilePaused = 0
        let resumed = false
        const out = await get({
          onData(_chunk, resume) {
            if (paused) dataWhilePaused++
            if (pauses > 0) return true
            pauses++
            paused = true
            setTimeout(() => {
              paused = false
              resumed = true
              resume()
            }, 120)
            return false
          },
        })
        expect(dataWhilePaused, name).toBe(0)
        expect(resumed, name).toBe(true)
        expect(out.error, name).toBeNull()
        expect(out.body.equals(Buffer.concat(pieces)), name).toBe(true)
        expect(out.events.filter((e) => e === 'data').length, name).toBeGreaterThan(1)
      }
      // A paused and resumed answer leaves its socket as good as any.
      expect(connectionIds()).toEqual([1, 1])
    })

    it('sends no data while paused by onHeaders, and ends a bodiless answer only on resume', async () => {
      respond = (req, socket) => {
        if (req.path === '/204') socket.write('HTTP/1.1 204 No Content\r\n\r\n')
        else socket.write('HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n4\r\nbody\r\n0\r\n\r\n')
      }
      for (const path of ['/200', '/204']) {
        let resumed = false
        let resumeCall: (() => void) | null = null
        const { done, outcome } = call({
          path,
          onHeaders(_status, resume) {
            resumeCall = resume
            return false
          },
          onData() {
            expect(resumed).toBe(true)
            return true
          },
        })
        // Paused from the head on: nothing more comes while the test holds it (its body was sent with it).
        const resume = await waitFor(() => resumeCall, { what: `the head of ${path}` })
        await sleep(40)
        expect(outcome.events).toHaveLength(2)
        resumed = true
        resume()
        const out = await done
        expect(out.error).toBeNull()
        expect(out.body.toString()).toBe(path === '/200' ? 'body' : '')
      }
      expect(connectionIds()).toEqual([1, 1])
    })
  })

  describe('requests', () => {
    it('frames a Buffer body with content-length', async () => {
      const body = Buffer.from('{"a":1}')
      const out = await get({
        method: 'POST',
        path: '/in',
        body,
        headers: ['content-type', 'application/json'],
      })
      expect(out.completed).toBe(true)
      const seen = requests[0]!
      expect(seen.method).toBe('POST')
      expect(seen.path).toBe('/in')
      expect(seen.headers.get('content-length')).toEqual([String(body.length)])
      expect(seen.headers.has('transfer-encoding')).toBe(false)
      expect(seen.headers.get('content-type')).toEqual(['application/json'])
      expect(seen.body.equals(body)).toBe(true)
    })

    it('sends an async-iterable body without a length chunked', async () => {
      const parts = ['one ', '', 'two ', 'three'].map((s) => Buffer.from(s))
      async function* stream(): AsyncGenerator<Buffer> {
        for (const part of parts) {
          await sleep(5)
          yield part
        }
      }
      const out = await get({ method: 'PUT', body: stream() })
      expect(out.completed).toBe(true)
      const seen = requests[0]!
      expect(seen.headers.get('transfer-encoding')).toEqual(['chunked'])
      expect(seen.headers.has('content-length')).toBe(false)
      expect(seen.body.toString()).toBe('one two three')
      // The raw bytes, not only what the server's parser made of them: an empty part must not end the body early.
      const raw = Buffer.concat(seen.conn.received).toString('latin1')
      expect(raw.endsWith('4\r\none \r\n4\r\ntwo \r\n5\r\nthree\r\n0\r\n\r\n')).toBe(true)
      expect((await get()).completed).toBe(true)
      expect(connectionIds()).toEqual([1, 1])
    })

    it('refuses a streamed body longer than its content-length before its excess is sent', async () => {
      async function* stream(): AsyncGenerator<Buffer> {
        yield Buffer.from('12345')
        await sleep(5)
        yield Buffer.from('GET /smuggled HTTP/1.1\r\nhost: x\r\n\r\n')
      }
      // Answered late, so the excess is in hand before the answer ends the exchange.
      respond = async (_req, socket) => {
        await sleep(100)
        if (!socket.destroyed) socket.write('HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n')
      }
      const out = await get({ method: 'POST', headers: ['content-length', '5'], body: stream() })
      expect(out.error?.code).toBe('UND_ERR_REQ_CONTENT_LENGTH_MISMATCH')
      await sleep(30)
      expect(requests.map((r) => r.path)).not.toContain('/smuggled')
      expect(Buffer.concat(connections[0]!.received).includes('smuggled')).toBe(false)
    })

    it('refuses a streamed body shorter than its content-length', async () => {
      async function* stream(): AsyncGenerator<Buffer> {
        yield Buffer.from('123')
      }
      const out = await get({ method: 'POST', headers: ['content-length', '5'], body: stream() })
      expect(out.error?.code).toBe('UND_ERR_REQ_CONTENT_LENGTH_MISMATCH')
    })

    it('refuses a header value with CR LF, and sends nothing', async () => {
      const out = await get({ headers: ['x-evil', 'a\r\nx-injected: 1'] })
      expect(out.error?.code).toBe('UND_ERR_INVALID_ARG')
      expect(out.events).toEqual(['error:UND_ERR_INVALID_ARG'])
      await sleep(30)
      expect(connections).toHaveLength(0)
    })

    it('refuses a path with a space, and sends nothing', async () => {
      const out = await get({ path: '/a b HTTP/1.1\r\nx: y' })
      expect(out.error?.code).toBe('UND_ERR_INVALID_ARG')
      const spaceOnly = await get({ path: '/a b' })
      expect(spaceOnly.error?.code).toBe('UND_ERR_INVALID_ARG')
      const del = await get({ path: '/a\x7fb' })
      expect(del.error?.code).toBe('UND_ERR_INVALID_ARG')
      await sleep(30)
      expect(connections).toHaveLength(0)
    })
  })

  describe('abort', () => {
    it('ends the exchange with the error given to abort, and closes its socket', async () => {
      respond = (_req, socket) => {
        socket.write('HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\nfirst')
      }
      const reason = new Error('caller left')
      let abort: ((err?: Error) => void) | null = null
      const out = await get({
        onConnect(fn) {
          abort = fn
        },
        onData() {
          abort!(reason)
          return true
        },
      })
      expect(out.error).toBe(reason)
      expect(out.completed).toBe(false)
      await waitFor(() => connections[0]!.closed, { timeoutMs: 1_000, what: 'the aborted socket closed' })
      await sleep(20)
      expect(out.events).toEqual(['connect', 'headers:200', 'data', 'error:caller left'])
      respond = OK
      expect((await get()).body.toString()).toBe('ok')
    })

    it('aborts from onConnect before anything is sent', async () => {
      const reason = new Error('left while queued')
      const out = await get({ onConnect: (abort) => abort(reason) })
      expect(out.error).toBe(reason)
      await sleep(30)
      expect(requests).toHaveLength(0)
      expect(out.events).toEqual(['connect', 'error:left while queued'])
      expect((await get()).body.toString()).toBe('ok')
    })

    it('still waits in close() for a request in flight after an abort from onConnect', async () => {
      const aborted = await get({ onConnect: (abort) => abort(new Error('gone')) })
      expect(aborted.error?.message).toBe('gone')
      respond = async (_req, socket) => {
        await sleep(150)
        socket.write('HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok')
      }
      const slow = call()
      await waitFor(() => requests.length === 1, { timeoutMs: 1_000, what: 'the slow request sent' })
      let closed = false
      const closing = d.close().then(() => {
        closed = true
      })
      await sleep(50)
      expect(closed).toBe(false)
      const out = await slow.done
      expect(out.completed).toBe(true)
      await closing
    })

    it('gives a queued request a working socket when the one before it aborts from onConnect', async () => {
      const one = createUpstreamDispatcher({ allowPrivate: true, connections: 1 })
      try {
        respond = async (req, socket) => {
          if (req.path === '/slow') await sleep(60)
          socket.write(`HTTP/1.1 200 OK\r\ncontent-length: ${req.path.length}\r\n\r\n${req.path}`)
        }
        const first = call({ dispatcher: one, path: '/slow' })
        const gone = call({ dispatcher: one, path: '/gone', onConnect: (abort) => abort(new Error('gone')) })
        const third = call({ dispatcher: one, path: '/third' })
        expect((await first.done).body.toString()).toBe('/slow')
        expect((await gone.done).error?.message).toBe('gone')
        const out = await third.done
        expect(out.error).toBeNull()
        expect(out.body.toString()).toBe('/third')
        expect(requests.map((r) => r.path)).toEqual(['/slow', '/third'])
      } finally {
        for (const conn of connections) conn.socket.destroy()
        await one.close()
      }
    })
  })

  describe('reads into a buffer of its own per socket', () => {
    /** A body of random bytes, different for every path. */
    const bodies = new Map<string, Buffer>()
    function bodyOf(path: string): Buffer {
      let body = bodies.get(path)
      if (body === undefined) {
        body = randomBytes(150_000 + bodies.size * 17_011)
        bodies.set(path, body)
      }
      return body
    }
    /** Sized answers in one write; chunked ones (odd paths) in uneven chunks over several writes. */
    const randomAnswers: Responder = async (req, socket) => {
      const body = bodyOf(req.path)
      if (Number(req.path.slice(1)) % 2 === 0) {
        socket.write(`HTTP/1.1 200 OK\r\ncontent-length: ${body.length}\r\n\r\n`)
        socket.write(body)
        return
      }
      socket.write('HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n')
      for (let at = 0; at < body.length; ) {
        const size = Math.min(body.length - at, 1 + ((at * 7919) % 50_000))
        socket.write(`${size.toString(16)}\r\n`)
        socket.write(body.subarray(at, at + size))
        socket.write('\r\n')
        at += size
        if (at % 3 === 0) await sleep(1)
      }
      socket.write('0\r\n\r\n')
    }

    it('reuses one buffer per socket from read to read, a different one on each socket', async () => {
      respond = randomAnswers
      const seen = [new Set<ArrayBufferLike>(), new Set<ArrayBufferLike>()]
      const outs = await Promise.all(
        [0, 1].map((i) =>
          get({
            path: `/${i * 2}`,
            onData(chunk) {
              seen[i]!.add(chunk.buffer)
              return true
            },
          }),
        ),
      )
      for (const [i, out] of outs.entries()) {
        expect(out.body.equals(bodyOf(`/${i * 2}`))).toBe(true)
        expect(out.events.filter((e) => e === 'data').length).toBeGreaterThan(2)
        expect(seen[i]!.size).toBe(1)
      }
      expect([...seen[0]!][0]).not.toBe([...seen[1]!][0])
    })

    it('shrinks a buffer that a run of reads used little of, and grows it back when a read fills it', async () => {
      const sizes: number[] = []
      const onData = (chunk: Buffer) => {
        sizes.push(chunk.buffer.byteLength)
        return true
      }
      // Small answers, one read each: after sixteen the socket reads into 4 KB.
      for (let i = 0; i < 20; i++) expect((await get({ onData })).body.toString()).toBe('ok')
      expect(sizes.slice(0, 16).every((size) => size === 64 * 1024)).toBe(true)
      expect(sizes.slice(16)).toEqual([4096, 4096, 4096, 4096])
      // A large answer on the same socket: reads that fill the buffer grow it, four times at each step.
      respond = randomAnswers
      sizes.length = 0
      const out = await get({ path: '/0', onData })
      expect(out.body.equals(bodyOf('/0'))).toBe(true)
      expect(sizes[0]).toBe(4096)
      expect(sizes).toContain(16 * 1024)
      expect(sizes.at(-1)).toBe(64 * 1024)
      expect(connectionIds().every((id) => id === 1)).toBe(true)
    })

    it('hands on every byte exactly while many answers pause and resume at random', async () => {
      respond = randomAnswers
      let pauses = 0
      const outs = await Promise.all(
        Array.from({ length: 16 }, (_, i) =>
          get({
            path: `/${i}`,
            onData(_chunk, resume) {
              // Every third chunk the handler holds the exchange: the socket must read nothing meanwhile.
              if (Math.random() >= 1 / 3) return true
              pauses++
              setTimeout(resume, Math.floor(Math.random() * 4))
              return false
            },
          }),
        ),
      )
      expect(pauses).toBeGreaterThan(10)
      for (const [i, out] of outs.entries()) {
        expect(out.error).toBeNull()
        expect(out.body.equals(bodyOf(`/${i}`)), `/${i}`).toBe(true)
      }
    })

    it('keeps a head intact while its handler holds it paused and the body waits', async () => {
      respond = randomAnswers
      let raw: Buffer[] = []
      let resumeLater: () => void = () => {}
      const { done } = call({
        path: '/2',
        onHeaders(_status, resume, head) {
          raw = head
          resumeLater = resume
          return false
        },
      })
      await waitFor(() => raw.length > 0, { what: 'the head' })
      // The body is all sent meanwhile: had the socket read on, it would have overwritten the head's bytes.
      await sleep(30)
      const fields = raw.map((b) => b.toString('latin1'))
      resumeLater()
      const out = await done
      expect(fields).toEqual(['content-length', String(bodyOf('/2').length)])
      expect(out.body.equals(bodyOf('/2'))).toBe(true)
    })
  })
  describe('sockets of other connectors', () => {
    /** One GET through `dispatcher` to `target`, the buffers its chunks were read into counted. */
    async function getThrough(dispatcher: UpstreamDispatcher, target: string) {
      const buffers = new Set<ArrayBufferLike>()
      const out = await get({
        dispatcher,
        origin: target,
        onData(chunk) {
          buffers.add(chunk.buffer)
          return true
        },
      })
      return { ...out, buffers: buffers.size, reads: out.chunks.length }
    }

    it('reads a TLS upstream into a buffer of its own too', async () => {
      const dir = mkdtempSync(join(tmpdir(), 'tollgate-tls-'))
      execFileSync(
        'openssl',
        [
          'req',
          '-x509',
          '-newkey',
          'ec',
          '-pkeyopt',
          'ec_paramgen_curve:P-256',
          '-nodes',
          '-days',
          '1',
          '-subj',
          '/CN=127.0.0.1',
          '-addext',
          'subjectAltName=IP:127.0.0.1',
          '-keyout',
          join(dir, 'key.pem'),
          '-out',
          join(dir, 'cert.pem'),
        ],
        { stdio: 'ignore' },
      )
      const body = randomBytes(300_000)
      const tlsServer = createTlsServer(
        { key: readFileSync(join(dir, 'key.pem')), cert: readFileSync(join(dir, 'cert.pem')) },
        (socket) => {
          socket.once('data', () =>
            socket.end(
              Buffer.concat([Buffer.from(`HTTP/1.1 200 OK\r\ncontent-length: ${body.length}\r\n\r\n`), body]),
            ),
          )
          socket.on('error', () => {})
        },
      )
      await new Promise<void>((resolve) => tlsServer.listen(0, '127.0.0.1', resolve))
      const tlsPort = (tlsServer.address() as { port: number }).port
      const dispatcher = new LeanDispatcher({
        connect: buildConnector({
          ca: readFileSync(join(dir, 'cert.pem')),
          onread: readIntoOwnBuffer,
        }),
        allowPrivate: true,
      })
      try {
        const out = await getThrough(dispatcher, `https://127.0.0.1:${tlsPort}`)
        expect(out.body.equals(body)).toBe(true)
        expect(out.reads).toBeGreaterThan(2)
        expect(out.buffers).toBe(1)
      } finally {
        await dispatcher.close()
        await new Promise<void>((resolve) => tlsServer.close(() => resolve()))
        rmSync(dir, { recursive: true, force: true })
      }
    })

    it('reads the chunks a socket emits when its connector does not set a read buffer', async () => {
      respond = (_req, socket) => {
        const body = Buffer.alloc(200_000, 'z')
        socket.write(
          Buffer.concat([Buffer.from(`HTTP/1.1 200 OK\r\ncontent-length: ${body.length}\r\n\r\n`), body]),
        )
      }
      const dispatcher = new LeanDispatcher({ connect: buildConnector({}), allowPrivate: true })
      try {
        const out = await getThrough(dispatcher, origin)
        expect(out.body.equals(Buffer.alloc(200_000, 'z'))).toBe(true)
        // Node's own reads: a fresh buffer each.
        expect(out.buffers).toBe(out.reads)
      } finally {
        await dispatcher.close()
      }
    })
  })
})
