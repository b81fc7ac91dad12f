// The request body of one paid call: attached to the uWS response synchronously, buffered (and the client
// paused above a limit) until proxy() consumes it as one sized buffer or as a stream.
import type { HttpResponse } from './uws.ts'

const DONE: IteratorResult<Buffer> = Object.freeze({ done: true, value: undefined })
/** The reason a body read or an upstream request fails once the client has left. */
export const CLIENT_LEFT = new Error('client aborted the request')

/**
 * The request body of one call. The caller creates it synchronously in the uWS handler (onData must be
 * attached before the handler returns) and it buffers until proxy() consumes it, pausing the client
 * above maxBufferedBytes. proxy() sends a complete body as one sized buffer, and streams the rest.
 */
export class RequestBody implements AsyncIterableIterator<Buffer> {
  readonly #res: HttpResponse
  readonly #maxBufferedBytes: number
  #chunks: Buffer[] = []
  #bufferedBytes = 0
  #complete = false
  #paused = false
  /** res is dead or about to be ended: never touch it again, and drop the rest of the upload. */
  #detached = false
  #failure: Error | null = null
  #resolve: ((result: IteratorResult<Buffer>) => void) | null = null
  /** whole(): waits for the last byte, refusing past its bound instead of pausing the client. */
  #wholeWaiter: ((whole: Buffer | null | 'too_large') => void) | null = null
  #wholeMaxBytes = 0
  #reject: ((err: Error) => void) | null = null

  constructor(res: HttpResponse, maxBufferedBytes: number) {
    this.#res = res
    this.#maxBufferedBytes = maxBufferedBytes
    res.onData(this.#onData)
  }

  /** Every byte of the body has arrived. */
  get complete(): boolean {
    return this.#complete
  }

  #onData = (chunk: ArrayBuffer, isLast: boolean): void => {
    if (this.#detached) return
    if (chunk.byteLength > 0) {
      // uWS reuses this memory as soon as the callback returns.
      const copy = Buffer.allocUnsafe(chunk.byteLength)
      copy.set(new Uint8Array(chunk))
      const resolve = this.#resolve
      if (resolve !== null) {
        this.#resolve = this.#reject = null
        resolve({ value: copy, done: false })
      } else {
        this.#chunks.push(copy)
        this.#bufferedBytes += copy.length
        if (this.#wholeWaiter !== null) {
          if (this.#bufferedBytes > this.#wholeMaxBytes) {
            const done = this.#wholeWaiter
            this.#wholeWaiter = null
            done('too_large')
            return
          }
        } else if (!this.#paused && this.#bufferedBytes > this.#maxBufferedBytes) {
          this.#paused = true
          this.#res.pause()
        }
      }
    }
    if (isLast) {
      this.#complete = true
      const whole = this.#wholeWaiter
      if (whole !== null) {
        this.#wholeWaiter = null
        whole(this.#peekAll())
      }
      const resolve = this.#resolve
      if (resolve !== null) {
        this.#resolve = this.#reject = null
        resolve(DONE)
      }
    }
  }

  /** Bytes buffered (the whole body once complete and not yet taken). */
  get length(): number {
    return this.#bufferedBytes
  }

  /** Replaces a complete body (a usage meter asks the upstream for its usage); false if not complete. */
  rewrite(change: (whole: Buffer) => Buffer | null): boolean {
    if (!this.#complete || this.#detached) return false
    const whole = this.#chunks.length === 1 ? this.#chunks[0]! : Buffer.concat(this.#chunks)
    const next = change(whole)
    if (next === null) return false
    this.#chunks = [next]
    this.#bufferedBytes = next.length
    return true
  }

  /**
   * Waits for the whole body (a price that depends on it), up to maxBytes: past that, 'too_large' (the
   * caller refuses it and releases the rest). The body stays buffered for proxy(); null when empty.
   */
  whole(maxBytes: number): Promise<Buffer | null | 'too_large'> {
    if (this.#bufferedBytes > maxBytes) return Promise.resolve('too_large')
    if (this.#complete || this.#detached) return Promise.resolve(this.#peekAll())
    this.#wholeMaxBytes = maxBytes
    // A client paused under the usual buffering bound would never send the rest: read on to maxBytes.
    this.#resumeClient()
    return new Promise((resolve) => {
      this.#wholeWaiter = resolve
    })
  }

  #peekAll(): Buffer | null {
    if (this.#chunks.length === 0) return null
    if (this.#chunks.length > 1) this.#chunks = [Buffer.concat(this.#chunks)]
    return this.#chunks[0]!
  }

  /** The whole body once complete, as one buffer (no copy when it came in one chunk), or null if empty. */
  takeAll(): Buffer | null {
    const chunks = this.#chunks
    this.#chunks = []
    this.#bufferedBytes = 0
    // The last chunk may have crossed the limit: a socket left paused would never read its next request.
    this.#resumeClient()
    if (chunks.length === 0) return null
    return chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks)
  }

  next(): Promise<IteratorResult<Buffer>> {
    const chunk = this.#chunks.shift()
    if (chunk !== undefined) {
      this.#bufferedBytes -= chunk.length
      if (this.#bufferedBytes < this.#maxBufferedBytes) this.#resumeClient()
      return Promise.resolve({ value: chunk, done: false })
    }
    if (this.#failure !== null) return Promise.reject(this.#failure)
    if (this.#complete || this.#detached) return Promise.resolve(DONE)
    return new Promise((resolve, reject) => {
      this.#resolve = resolve
      this.#reject = reject
    })
  }

  /** undici stopped reading (the upstream failed or answered early): the rest of the upload is dropped. */
  return(): Promise<IteratorResult<Buffer>> {
    this.release()
    return Promise.resolve(DONE)
  }

  [Symbol.asyncIterator](): this {
    return this
  }

  /**
   * Call before res is ended: drops whatever is left of the upload and resumes a paused client so its
   * connection can carry the next request. A caller that answers without calling proxy() calls it too.
   */
  release(): void {
    if (this.#detached) return
    this.#resumeClient()
    this.#detach()
    const resolve = this.#resolve
    if (resolve !== null) {
      this.#resolve = this.#reject = null
      resolve(DONE)
    }
  }

  /** The client left: res is dead. A pending read fails so undici stops writing the upstream body. */
  fail(): void {
    if (this.#detached) return
    this.#detach()
    this.#failure = CLIENT_LEFT
    const reject = this.#reject
    if (reject !== null) {
      this.#resolve = this.#reject = null
      reject(CLIENT_LEFT)
    }
  }

  #detach(): void {
    this.#detached = true
    const whole = this.#wholeWaiter
    if (whole !== null) {
      this.#wholeWaiter = null
      whole(null)
    }
    this.#chunks = []
    this.#bufferedBytes = 0
  }

  #resumeClient(): void {
    if (this.#paused && !this.#detached) {
      this.#paused = false
      this.#res.resume()
    }
  }
}

export function createRequestBody(res: HttpResponse, maxBufferedBytes: number): RequestBody {
  return new RequestBody(res, maxBufferedBytes)
}

/** The forwarded content-length after the body was rewritten (the payment taken out, a usage option put in). */
export function setContentLength(headers: Array<[string, string]>, length: number): void {
  for (const h of headers) if (h[0] === 'content-length') h[1] = String(length)
}
