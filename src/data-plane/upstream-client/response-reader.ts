// Reads one HTTP/1.1 response at a time off an upstream socket's chunks: the head, then the body framed by
// content-length, chunked coding or the connection's close (RFC 9112 §6.3). Body bytes are handed on as
// views of the chunk they came in (no copy); a chunk split across reads is never joined, only a head is.
// A chunk is good only until the socket reads again (the client reads every socket into one buffer of its
// own, reused), so what the reader keeps across reads it copies: a head or chunk line not yet whole. What it
// holds while its sink has paused it stays a view: a paused socket does not read.
// Framing the reader cannot be sure of (a length and a chunked coding together, two lengths that differ,
// a malformed size or line) is an error, never a guess: the connection is then closed, not reused.

/** What the reader tells its connection. Returning false from head or body pauses it until resume(). */
export interface ResponseSink {
  /** The final head (status ≥ 200), or an interim one (1xx but 101) that another head follows. */
  head(status: number, raw: Buffer[]): boolean
  body(chunk: Buffer): boolean
  /** The body ended; reusable: the connection may carry another request. */
  end(reusable: boolean): void
  error(err: Error): void
}

enum State {
  Head,
  Length,
  ChunkSize,
  ChunkData,
  ChunkEnd,
  Trailers,
  UntilClose,
  Done,
  Failed,
}

/** Largest head accepted, as node:http's default (--max-http-header-size). */
const MAX_HEAD_BYTES = 16 * 1024
/** Largest chunk-size line (with extensions) or trailer line. */
const MAX_LINE_BYTES = 4096
const CRLF = Buffer.from('\r\n')
const CRLFCRLF = Buffer.from('\r\n\r\n')
// A field name is a token (RFC 9110 §5.6.2); a value has no CR, LF or NUL, and no other control but tab.
const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/
const STATUS_LINE = /^HTTP\/1\.([01]) (\d{3})(?: |$)/
const DIGITS = /^\d{1,15}$/
const HEX = /^[0-9A-Fa-f]{1,13}$/

function framingError(message: string): Error {
  return Object.assign(new Error(`upstream response: ${message}`), { code: 'UND_ERR_SOCKET' })
}

export class ResponseReader {
  readonly #sink: ResponseSink
  #state = State.Done
  /** The request was HEAD: no body whatever the head says. */
  #headOnly = false
  #keepAlive = true
  /** Body bytes left: of the content-length, or of the current chunk. */
  #left = 0
  /** A head or a chunk line not yet complete, joined with what comes next. */
  #partial: Buffer | null = null
  /** Bytes left over when the sink paused; fed again by resume(). */
  #held: Buffer | null = null
  #paused = false
  /** A bodiless response paused at its head: its end is told by resume(). */
  #endDue = false
  /** Seconds the upstream keeps an idle connection open (keep-alive: timeout=N), or -1. */
  keepAliveSeconds = -1

  constructor(sink: ResponseSink) {
    this.#sink = sink
  }

  /** Expects the response to a new request. */
  start(headOnly: boolean): void {
    this.#state = State.Head
    this.#headOnly = headOnly
    this.#keepAlive = true
    this.#partial = null
    this.#held = null
    this.#paused = false
    this.#endDue = false
    this.keepAliveSeconds = -1
  }

  /** Bytes off the socket. Bytes nobody asked for (after a response ended) are an error: the connection is spoiled. */
  feed(chunk: Buffer): void {
    if (this.#paused) {
      // Cannot come from a paused socket; a copy all the same, should a socket read once more.
      this.#held = this.#held === null ? Buffer.from(chunk) : Buffer.concat([this.#held, chunk])
      return
    }
    this.#run(chunk)
  }

  get paused(): boolean {
    return this.#paused
  }

  resume(): void {
    if (!this.#paused) return
    this.#paused = false
    const held = this.#held
    this.#held = null
    if (this.#endDue) {
      this.#endDue = false
      this.#sink.end(this.#keepAlive && held === null)
      return
    }
    if (held !== null) this.#run(held)
  }

  /** The socket ended: the end of a close-delimited body, else a response cut short. */
  closed(): void {
    if (this.#state === State.UntilClose) {
      this.#state = State.Done
      this.#sink.end(false)
    } else if (this.#state !== State.Done && this.#state !== State.Failed) {
      this.#fail(Object.assign(new Error('other side closed'), { code: 'UND_ERR_SOCKET' }))
    }
  }

  #fail(err: Error): void {
    this.#state = State.Failed
    this.#sink.error(err)
  }

  #run(chunk: Buffer): void {
    let at = 0
    const n = chunk.length
    while (at < n) {
      switch (this.#state) {
        case State.Head: {
          at = this.#readHead(chunk, at)
          const state = this.#state as State
          if (state === State.Failed) return
          if (state === State.Head) break // an interim head, or a head not whole yet (then at === n)
          if (this.#paused) {
            // The sink holds the head (its extra headers are being made): the rest waits for resume().
            this.#endDue = state === State.Done
            if (at < n) this.#held = chunk.subarray(at)
            return
          }
          if (state === State.Done) {
            this.#finish(chunk, at)
            return
          }
          break
        }
        case State.Length: {
          const take = Math.min(this.#left, n - at)
          const part = take === n && at === 0 ? chunk : chunk.subarray(at, at + take)
          at += take
          this.#left -= take
          if (this.#left === 0) this.#state = State.Done
          const more = this.#sink.body(part)
          if (this.#state === State.Done) {
            this.#finish(chunk, at)
            return
          }
          if (!more) return this.#pause(chunk, at)
          break
        }
        case State.ChunkSize: {
          const line = this.#line(chunk, at)
          if (line === null) return
          at = line.next
          const size = line.text.split(';', 1)[0]!.trim()
          if (!HEX.test(size)) return this.#fail(framingError('malformed chunk size'))
          this.#left = Number.parseInt(size, 16)
          this.#state = this.#left === 0 ? State.Trailers : State.ChunkData
          break
        }
        case State.ChunkData: {
          const take = Math.min(this.#left, n - at)
          const part = chunk.subarray(at, at + take)
          at += take
          this.#left -= take
          if (this.#left === 0) this.#state = State.ChunkEnd
          if (!this.#sink.body(part)) return this.#pause(chunk, at)
          break
        }
        case State.ChunkEnd: {
          const line = this.#line(chunk, at)
          if (line === null) return
          if (line.text !== '') return this.#fail(framingError('chunk data longer than its size'))
          at = line.next
          this.#state = State.ChunkSize
          break
        }
        case State.Trailers: {
          // Trailer fields are read and dropped: the relay sends its own framing.
          const line = this.#line(chunk, at)
          if (line === null) return
          at = line.next
          if (line.text === '') {
            this.#state = State.Done
            this.#finish(chunk, at)
            return
          }
          break
        }
        case State.UntilClose: {
          const part = at === 0 ? chunk : chunk.subarray(at)
          at = n
          if (!this.#sink.body(part)) return this.#pause(chunk, at)
          break
        }
        default: {
          // Done or Failed: bytes nobody asked for. The connection cannot be trusted with another request.
          if (this.#state === State.Done) this.#fail(framingError('bytes after the response'))
          return
        }
      }
      if ((this.#state as State) === State.Failed) return
    }
  }

  #pause(chunk: Buffer, at: number): void {
    if (this.#state === State.Failed) return
    this.#paused = true
    if (at < chunk.length) this.#held = chunk.subarray(at)
  }

  #finish(chunk: Buffer, at: number): void {
    // A well-behaved upstream sends nothing before the next request: anything more spoils the connection.
    const reusable = this.#keepAlive && at === chunk.length
    this.#sink.end(reusable)
  }

  /** A CRLF-ended line of a chunked body, joined across reads; null when it is not complete yet. */
  #line(chunk: Buffer, at: number): { text: string; next: number } | null {
    let buf = chunk
    let from = at
    if (this.#partial !== null) {
      buf = Buffer.concat([this.#partial, chunk.subarray(at)])
      from = 0
      this.#partial = null
    }
    const end = buf.indexOf(CRLF, from)
    if (end < 0) {
      if (buf.length - from > MAX_LINE_BYTES) {
        this.#fail(framingError('chunk line too long'))
        return null
      }
      // Kept across reads: a copy unless it is already one (joined above).
      this.#partial = buf === chunk ? Buffer.from(buf.subarray(from)) : buf.subarray(from)
      return null
    }
    if (end - from > MAX_LINE_BYTES) {
      this.#fail(framingError('chunk line too long'))
      return null
    }
    const text = buf.toString('latin1', from, end)
    // Positions are of the joined buffer when a partial line was prepended; map back into chunk.
    const next = buf === chunk ? end + 2 : chunk.length - (buf.length - (end + 2))
    return { text, next }
  }

  /** Reads (part of) a head; returns where the body starts in chunk, or chunk.length if it is not whole. */
  #readHead(chunk: Buffer, at: number): number {
    let buf: Buffer
    if (this.#partial === null) buf = at === 0 ? chunk : chunk.subarray(at)
    else buf = Buffer.concat([this.#partial, chunk.subarray(at)])
    const end = buf.indexOf(CRLFCRLF)
    if (end < 0) {
      if (buf.length > MAX_HEAD_BYTES) this.#fail(framingError('head too large'))
      // Kept across reads: a copy unless it is already one (joined above).
      else this.#partial = this.#partial === null ? Buffer.from(buf) : buf
      return chunk.length
    }
    if (end > MAX_HEAD_BYTES) {
      this.#fail(framingError('head too large'))
      return chunk.length
    }
    const consumed = this.#partial === null ? end + 4 : end + 4 - this.#partial.length
    this.#partial = null
    this.#parseHead(buf, end)
    return at + consumed
  }

  #parseHead(buf: Buffer, end: number): void {
    const text = buf.toString('latin1', 0, end)
    let lineEnd = text.indexOf('\r\n')
    if (lineEnd < 0) lineEnd = end
    const status = STATUS_LINE.exec(text.slice(0, lineEnd))
    if (status === null || hasControl(text, 0, lineEnd))
      return this.#fail(framingError('malformed status line'))
    const code = Number(status[2])
    const http10 = status[1] === '0'
    const raw: Buffer[] = []
    let length = -1
    let chunked = false
    let encoded = false
    let close = http10
    let from = lineEnd + 2
    while (from < end) {
      let to = text.indexOf('\r\n', from)
      if (to < 0) to = end
      const colon = text.indexOf(':', from)
      if (colon < 0 || colon > to) return this.#fail(framingError('malformed header line'))
      const name = text.slice(from, colon)
      if (!TOKEN.test(name)) return this.#fail(framingError('malformed header name'))
      let vs = colon + 1
      let ve = to
      while (vs < ve && (text.charCodeAt(vs) === 32 || text.charCodeAt(vs) === 9)) vs++
      while (ve > vs && (text.charCodeAt(ve - 1) === 32 || text.charCodeAt(ve - 1) === 9)) ve--
      if (hasControl(text, vs, ve)) return this.#fail(framingError('malformed header value'))
      const value = text.slice(vs, ve)
      raw.push(buf.subarray(from, colon), buf.subarray(vs, ve))
      if (name.length === 14 && name.toLowerCase() === 'content-length') {
        // A list of equal lengths is one length (RFC 9110 §8.6); anything else is refused.
        for (const item of value.split(',')) {
          const v = item.trim()
          if (!DIGITS.test(v)) return this.#fail(framingError('malformed content-length'))
          const parsed = Number(v)
          if (length >= 0 && parsed !== length) return this.#fail(framingError('conflicting content-length'))
          length = parsed
        }
      } else if (name.length === 17 && name.toLowerCase() === 'transfer-encoding') {
        const codings = value.toLowerCase().split(',')
        if (codings.length !== 1 || codings[0]!.trim() !== 'chunked' || encoded)
          return this.#fail(framingError('unsupported transfer-encoding'))
        chunked = true
        encoded = true
      } else if (name.length === 10) {
        const lower = name.toLowerCase()
        if (lower === 'connection') {
          for (const token of value.toLowerCase().split(',')) {
            const t = token.trim()
            if (t === 'close') close = true
            else if (t === 'keep-alive' && http10) close = false
          }
        } else if (lower === 'keep-alive') {
          const m = /(?:^|[,\s])timeout\s*=\s*(\d+)/i.exec(value)
          if (m !== null) this.keepAliveSeconds = Number(m[1])
        }
      }
      from = to + 2
    }
    if (chunked && length >= 0) return this.#fail(framingError('both content-length and transfer-encoding'))
    if (code < 200) {
      // An interim answer: told, then the final head follows on the same connection. A switch of
      // protocols is never asked for, so 101 cannot be relayed.
      if (code === 101) return this.#fail(framingError('unexpected 101'))
      this.#sink.head(code, raw)
      this.#state = State.Head
      return
    }
    this.#keepAlive = !close
    if (this.#headOnly || code === 204 || code === 304 || (length === 0 && !chunked)) {
      this.#state = State.Done
    } else if (chunked) {
      this.#state = State.ChunkSize
    } else if (length > 0) {
      this.#state = State.Length
      this.#left = length
    } else {
      this.#state = State.UntilClose
      this.#keepAlive = false
    }
    if (!this.#sink.head(code, raw)) this.#paused = true
  }
}

/** Whether text[from, to) holds a control character other than tab (so CR, LF or NUL among them). */
function hasControl(text: string, from: number, to: number): boolean {
  for (let i = from; i < to; i++) {
    const c = text.charCodeAt(i)
    if ((c < 32 && c !== 9) || c === 127) return true
  }
  return false
}
