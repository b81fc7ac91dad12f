// WebSocket sessions on a metered URL: the upgrade is paid as a call is (the proof in its headers, the same 402
// unpaid), the payment's value is prepaid credit, frames are relayed both ways and metered as they reach the
// client, and the session is captured once at its end for what it delivered, the rest refunded. On an
// endpoint that sells a pass instead, the upgrade signs in (SIGN-IN-WITH-X), draws one use as a call does,
// and the session is not metered for money: it ends when the pass does, at the latest.

import type { us_socket_context_t, WebSocket, WebSocketBehavior } from 'uWebSockets.js'
import { createHash } from 'node:crypto'
import { isIP } from 'node:net'
import UpstreamSocket from 'ws'
import { type ErrorCode, JSON_CONTENT_TYPE as JSON_TYPE } from '../errors.ts'
import { newId } from '../ids.ts'
import type { Logger } from '../observability/logger.ts'
import {
  callsCaptured,
  websocketBytes,
  websocketChargedAtomic,
  websocketFrames,
  websocketSessions,
  websocketSessionsOpen,
  websocketTopUps,
} from '../observability/metrics.ts'
import { MAX_MESSAGE_BYTES_LIMIT, SessionMeter } from '../pricing/session.ts'
import { requestIdFrom } from '../request-id.ts'
import type { SchemeRegistry } from '../schemes/registry.ts'
import type { Payment, Verdict } from '../schemes/scheme.ts'
import { guardedLookup, isPrivateAddress } from '../ssrf.ts'
import { challengeBody, mppHeader, quoteExpiry, v2Header } from '../wire/challenge.ts'
import { mppCredential, parseProof } from '../wire/proof.ts'
import { writeAnswer, writeErrorAnswer } from './answer-writer.ts'
import { peerAddress } from './client-address.ts'
import { type EndpointCache, type LiveEndpoint, loadEndpoint, NOT_FOUND } from './endpoint-cache.ts'
import { type PassUses, passEndsMs } from './pass-uses.ts'
import { forwardHeaders, isConfinedSubPath } from './proxy.ts'
import type { HttpRequest, HttpResponse } from './uws.ts'
import { readTopUp, SessionCredit, type TopUpRequest, type TopUpResult } from './ws-credit.ts'

/** The part of app.ts's ProofEdge a session uses (declared here: app.ts mounts this file's behaviour). */
export interface SessionEdge {
  clientKey(res: HttpResponse, req: HttpRequest): string
  peerTrusted(res: HttpResponse): boolean
  proofRefused(client: string): void
}

export interface WsSessionDeps {
  edge?: SessionEdge
  endpoints: EndpointCache
  schemes: SchemeRegistry
  logger: Logger
  replication?: { readonly refusing: string | null }
  /** Passes: an upgrade signed in (sign-in-with-x) draws one use; absent: pass sessions are not opened. */
  passes?: PassUses
  /** maxSessionMs: a session ends before its claim's retry window (proxy.retry_window_ms) does. */
  settings: { quoteTtlMs: number; maxSessionMs: number }
}

/** What uWS keeps on each socket: its session. */
export interface SessionData {
  session: Session
}

// Above this many bytes waiting for the client, the upstream socket is paused; resumed below LOW on drain.
const HIGH_WATER_BYTES = 1_048_576
const LOW_WATER_BYTES = 262_144
// Credit below a fifth of what the payment covers: the client is asked for more, once.
const LOW_CREDIT_PARTS = 5n
/** The close code of a session whose credit ran out (private range 4000-4999, after HTTP 402). */
export const CREDIT_EXHAUSTED = 4402
const NO_TOP_UP = 'payment required: no top-up in time'
/** The close code of a session at the end of its payment's window (after HTTP 408). */
export const WINDOW_OVER = 4408
/** A pass session whose pass ended: the close code of a spent credit, with its own reason. */
const PASS_ENDED = 'payment required: the pass expired'

const to = {
  upstreamFrames: websocketFrames.labels('to_upstream'),
  clientFrames: websocketFrames.labels('to_client'),
  upstreamBytes: websocketBytes.labels('to_upstream'),
  clientBytes: websocketBytes.labels('to_client'),
}

/** The uWS behaviour mounted on /m/*: an upgrade opens a session, every other event goes to it. */
export function createWebsocketBehavior(deps: WsSessionDeps): WebSocketBehavior<SessionData> {
  return {
    // uWS's own cap; each endpoint's max_message_bytes is checked per message (1009 past it).
    maxPayloadLength: MAX_MESSAGE_BYTES_LIMIT,
    // Never dropped by uWS (a dropped frame would be charged and not delivered): the upstream is paused first.
    maxBackpressure: 4 * MAX_MESSAGE_BYTES_LIMIT,
    idleTimeout: 120,
    upgrade: (res, req, context) => new Opening(deps, res, req, context).start(),
    open: (ws) => ws.getUserData().session.opened(ws),
    message: (ws, message, isBinary) => ws.getUserData().session.fromClient(message, isBinary),
    drain: (ws) => ws.getUserData().session.drained(),
    ping: (ws, message) => ws.getUserData().session.pingFromClient(message),
    close: (ws, code, message) => ws.getUserData().session.clientClosed(code, message),
  }
}

/** One upgrade request: endpoint → proof → verify → claim → upstream socket → 101, or an HTTP answer. */
class Opening {
  aborted = false
  readonly endpointId: string
  readonly subPath: string
  readonly query: string
  readonly key: string
  readonly protocols: string[]
  readonly paymentHeader: string
  readonly signIn: string
  readonly requestId: string
  readonly headers: Array<[string, string]> = []
  readonly remoteAddress: string
  readonly client: string
  readonly peerTrusted: boolean
  endpoint: LiveEndpoint | null = null
  payment: Payment | null = null

  constructor(
    readonly deps: WsSessionDeps,
    readonly res: HttpResponse,
    req: HttpRequest,
    readonly context: us_socket_context_t,
  ) {
    res.onAborted(() => {
      this.aborted = true
    })
    // Everything is read now: the request dies with this callback.
    this.endpointId = req.getParameter(0) ?? ''
    this.subPath = req.getUrl().slice(3 + this.endpointId.length)
    this.query = req.getQuery() ?? ''
    this.key = req.getHeader('sec-websocket-key')
    this.protocols = req
      .getHeader('sec-websocket-protocol')
      .split(',')
      .map((p) => p.trim())
      .filter((p) => p !== '')
    this.paymentHeader =
      req.getHeader('x-payment') ||
      req.getHeader('payment-signature') ||
      mppCredential(req.getHeader('authorization'))
    this.signIn = req.getHeader('sign-in-with-x')
    this.requestId = requestIdFrom(req.getHeader('x-request-id'))
    req.forEach((k, v) => {
      // The handshake is the upstream socket's own; the rest is forwarded as a paid call's headers are.
      if (!k.startsWith('sec-websocket-')) this.headers.push([k, v])
    })
    this.remoteAddress = peerAddress(res)
    this.client = deps.edge?.clientKey(res, req) ?? ''
    this.peerTrusted = deps.edge?.peerTrusted(res) === true
  }

  start(): void {
    if (!isConfinedSubPath(this.subPath)) return this.respondError('invalid_path')
    const cached = this.deps.endpoints.get(this.endpointId)
    if (cached !== undefined) return this.withEndpoint(cached)
    loadEndpoint(this.deps.endpoints, this.endpointId).then(
      (entry) => this.withEndpoint(entry),
      (err) => this.respondUnavailable('endpoint_lookup_failed', err),
    )
  }

  withEndpoint(entry: LiveEndpoint | typeof NOT_FOUND): void {
    if (this.aborted) return
    if (entry === NOT_FOUND || !entry.active) {
      if (this.paymentHeader) this.deps.edge?.proofRefused(this.client)
      return this.respondError('endpoint_not_found')
    }
    if (entry.websocket === null) return this.respondError('websocket_not_allowed')
    this.endpoint = entry
    if (this.deps.replication?.refusing) return this.respondError('replication_unsafe')
    // Not priced by usage: a pass endpoint, whose sessions open by signing in only (a payment buys no credit).
    if (entry.usage === null) return this.signedIn()
    if (!this.paymentHeader) return this.respond402('payment_required')
    const quote = entry.quoteFor('GET', this.subPath)
    const verdict = this.deps.schemes.verify(parseProof(this.paymentHeader), {
      endpoint: {
        id: entry.id,
        accountId: entry.accountId,
        timeoutMs: entry.target.timeoutMs,
        settleBeforeAnswer: false,
        protocols: entry.protocols,
      },
      quote,
      nowMs: Date.now(),
      client: this.client,
    })
    if (verdict instanceof Promise) verdict.then((v) => this.withVerdict(v))
    else this.withVerdict(verdict)
  }

  /** A pass session: the sign-in checked and one use drawn, as for a call (the draw is the claim). */
  signedIn(): void {
    const passes = this.deps.passes
    if (!this.signIn || passes === undefined) return this.respond402('payment_required')
    const entry = this.endpoint!
    passes.use(this.signIn, { id: entry.id, resourceUrl: entry.resourceUrl }).then(
      (v) => this.withVerdict(v),
      (err) => this.respondUnavailable('pass_failed', err),
    )
  }

  withVerdict(verdict: Verdict): void {
    if (this.aborted) {
      if (verdict.ok === true) verdict.payment.drop()
      return
    }
    if (verdict.ok === false) return this.respond402(verdict.reason, verdict.requiredHeader)
    if (verdict.ok === 'unavailable') return this.respondUnavailable(verdict.reason, verdict.err)
    if (verdict.ok === 'error') return this.respondError(verdict.code)
    if (verdict.ok === 'answered') return this.respondError('invalid_state')
    const payment = verdict.payment
    this.payment = payment
    const claimed = payment.claim()
    if (typeof claimed === 'string') return this.withClaim(claimed)
    claimed.then(
      (outcome) => this.withClaim(outcome),
      (err) => this.respondUnavailable('claim_failed', err),
    )
  }

  withClaim(outcome: string): void {
    const payment = this.payment!
    if (outcome === 'used' || outcome === 'insufficient_funds') {
      if (this.aborted) return
      return this.respond402(outcome === 'used' ? 'proof_already_used' : 'insufficient_funds')
    }
    if (outcome === 'busy') return this.aborted ? undefined : this.respondError('payment_in_progress')
    // Nothing was relayed yet: a client gone, or an upstream refused, leaves the proof free for a retry.
    if (this.aborted) return payment.release()
    this.connectUpstream()
  }

  /** The upstream socket, under the same address rules as an HTTP upstream (checked again at connect time). */
  connectUpstream(): void {
    const entry = this.endpoint!
    const target = entry.target
    const host = target.host.replace(/:\d+$/, '').replace(/^\[|\]$/g, '')
    if (!target.allowPrivate && isIP(host) !== 0 && isPrivateAddress(host)) {
      this.payment!.release()
      return this.respondError('upstream_forbidden')
    }
    const url = `${target.origin.replace(/^http/, 'ws')}${target.basePath}${this.subPath}${this.query ? `?${this.query}` : ''}`
    const flat = forwardHeaders(
      {
        method: 'GET',
        pathAndQuery: this.subPath,
        headers: this.headers,
        remoteAddress: this.remoteAddress,
        peerTrusted: this.peerTrusted,
        requestId: this.requestId,
        traceparent: null,
      },
      target,
    )
    const headers: Record<string, string> = {}
    for (let i = 0; i < flat.length; i += 2) {
      const name = flat[i]!
      // ws writes its own Host; a repeated header is folded as HTTP allows.
      if (name === 'host') continue
      headers[name] = headers[name] === undefined ? flat[i + 1]! : `${headers[name]}, ${flat[i + 1]}`
    }
    const upstream = new UpstreamSocket(url, this.protocols, {
      headers,
      maxPayload: entry.websocket!.maxMessageBytes,
      handshakeTimeout: target.timeoutMs,
      perMessageDeflate: false,
      followRedirects: false,
      ...(target.allowPrivate ? {} : { lookup: guardedLookup }),
    })
    let settled = false
    const refused = (status: number | null, err?: Error & { code?: string }) => {
      if (settled) return
      settled = true
      upstream.terminate()
      this.payment!.release()
      if (this.aborted) return
      if (err?.code === 'ERR_TOLLGATE_PRIVATE_TARGET') return this.respondError('upstream_forbidden')
      this.respondError('upstream_unreachable', status === null ? undefined : `status ${status}`)
    }
    upstream.on('unexpected-response', (_req, res) => refused(res.statusCode ?? 502))
    upstream.on('error', (err) => refused(null, err))
    upstream.on('open', () => {
      if (settled) return
      settled = true
      if (this.aborted) {
        upstream.close(1001, 'client left')
        return this.payment!.release()
      }
      this.upgrade(upstream)
    })
  }

  upgrade(upstream: UpstreamSocket): void {
    const entry = this.endpoint!
    const payment = this.payment!
    const receiptId = newId('rcpt')
    const passEnds = passEndsMs(payment)
    const credit = passEnds === undefined ? new SessionCredit(payment, receiptId, this.deps.schemes) : null
    const session = new Session(this.deps, entry, credit, upstream, receiptId)
    if (passEnds !== undefined) session.pass = { use: payment, endsMs: passEnds }
    const receipt = credit === null ? payment.receipt(true) : credit.receipt()
    const res = this.res
    res.cork(() => {
      res.writeStatus('101 Switching Protocols')
      res.writeHeader('x-request-id', this.requestId)
      res.writeHeader('x-receipt-id', receiptId)
      if (receipt !== null) res.writeHeader(receipt[0], receipt[1])
      res.upgrade<SessionData>({ session }, this.key, upstream.protocol, '', this.context)
    })
  }

  respond402(reason: string, requiredHeader?: string): void {
    if (this.paymentHeader) this.deps.edge?.proofRefused(this.client)
    const challenge = this.endpoint!.quoteFor('GET', this.subPath).challenge
    const text = challengeBody(challenge, reason, quoteExpiry(this.deps.settings.quoteTtlMs), this.requestId)
    const pass = this.endpoint!.pass
    // A pass endpoint's 402 carries a fresh sign-in challenge (its nonce is single-use), as a call's does.
    const required =
      requiredHeader ?? (pass === null ? v2Header(challenge, reason) : pass.v2Header(challenge, reason))
    const mpp = mppHeader(challenge, Date.now())
    const flat =
      mpp === null
        ? ['cache-control', 'no-store', 'payment-required', required]
        : ['cache-control', 'no-store', 'payment-required', required, 'www-authenticate', mpp]
    writeAnswer(this.res, '402 Payment Required', this.requestId, JSON_TYPE, flat, text)
  }

  respondError(code: ErrorCode, message?: string): void {
    if (this.aborted) return
    writeErrorAnswer(this.res, code, this.requestId, message ? { message } : undefined)
  }

  respondUnavailable(reason: string, err: unknown): void {
    this.deps.logger.error('websocket session failed to open', {
      request_id: this.requestId,
      endpoint_id: this.endpointId,
      reason,
      err,
    })
    this.respondError('verification_unavailable')
  }
}

/**
 * One open session: relays both ways with backpressure, meters what reaches the client, asks for credit in
 * band when it runs low, takes top-ups sent on the socket, pauses when the credit is spent and closes with
 * 4402 when no top-up comes in time, and is captured once when either side ends it.
 */
export class Session {
  ws: WebSocket<SessionData> | null = null
  /** Null for a pass session: nothing is metered for money. */
  readonly meter: SessionMeter | null
  /** A pass session: the use it drew and when its pass ends (epoch ms; null: never); null otherwise. */
  pass: { use: Payment; endsMs: number | null } | null = null
  /** Bytes delivered to the client (a pass session's delivery; a metered one's meter counts its own). */
  bytes = 0
  readonly startedMs = performance.now()
  /** Who ended it (a metric label); null while open. */
  ending: string | null = null
  asked = false
  finished = false
  timer: NodeJS.Timeout | null = null
  window: NodeJS.Timeout | null = null
  /** Credit spent: the timer that closes the session unless a top-up comes first; null otherwise. */
  waiting: NodeJS.Timeout | null = null
  /** Upstream messages that came while waiting: delivered (and metered) only after a top-up. */
  held: Array<[Buffer, boolean]> = []
  toppingUp = false
  waitExpired = false
  /** SHA-256 over the messages delivered to the client, in order: the signed final receipt's delivery. */
  readonly digest = createHash('sha256')

  constructor(
    readonly deps: WsSessionDeps,
    readonly endpoint: LiveEndpoint,
    /** Null for a pass session (the draw was the claim: nothing is charged). */
    readonly credit: SessionCredit | null,
    readonly upstream: UpstreamSocket,
    readonly receiptId: string,
  ) {
    this.meter =
      credit === null ? null : new SessionMeter(endpoint.usage!, endpoint.websocket!, this.startedMs)
  }

  opened(ws: WebSocket<SessionData>): void {
    this.ws = ws
    websocketSessionsOpen.inc()
    const upstream = this.upstream
    // The socket's binaryType is ws's default, 'nodebuffer': every message is one Buffer.
    upstream.on('message', (data, isBinary) => this.fromUpstream(data as Buffer, isBinary))
    upstream.on('ping', (data) => this.ws?.ping(data))
    upstream.on('close', (code, reason) => this.upstreamClosed(code, reason.toString('utf8')))
    upstream.on('error', (err) => {
      // ws closes the socket after an error: a message over max_message_bytes is 1009, anything else 1011.
      const tooBig = (err as { code?: string }).code === 'WS_ERR_UNSUPPORTED_MESSAGE_LENGTH'
      this.end(
        tooBig ? 1009 : 1011,
        tooBig ? 'message too big' : 'upstream error',
        tooBig ? 'too_big' : 'upstream',
      )
    })
    // A claim still uncaptured when its retry window ends is refunded whole by the expiry job: the session is
    // captured before that, and the client opens a new one to go on.
    this.window = setTimeout(
      () => this.end(WINDOW_OVER, 'session window over: open a new session', 'window'),
      this.deps.settings.maxSessionMs,
    )
    const endsMs = this.pass?.endsMs ?? null
    // A pass session ends with its pass (sooner than the window: else the window ends it first).
    if (endsMs !== null && endsMs - Date.now() < this.deps.settings.maxSessionMs)
      this.timer = setTimeout(
        () => this.end(CREDIT_EXHAUSTED, PASS_ENDED, 'pass'),
        Math.max(0, endsMs - Date.now()),
      )
    // Priced by time: the credit also runs out with no frame at all.
    if (this.endpoint.usage?.unit === 'duration_ms') this.timer = setInterval(() => this.checkCredit(), 1_000)
  }

  fromClient(message: ArrayBuffer, isBinary: boolean): void {
    if (this.ending !== null) return
    if (message.byteLength > this.endpoint.websocket!.maxMessageBytes)
      return this.end(1009, 'message too big', 'too_big')
    // A pass session has no credit to top up: every message is the upstream's.
    const topUp = this.credit === null ? null : readTopUp(new Uint8Array(message), isBinary)
    if (topUp !== null) return void this.topUp(topUp)
    // uWS cannot pause a WebSocket's reads: an upstream that does not keep up ends the session instead.
    if (this.upstream.bufferedAmount > HIGH_WATER_BYTES * 4)
      return this.end(1013, 'upstream is not keeping up', 'backpressure')
    // The ArrayBuffer is uWS's and is neutered when this callback returns: copied.
    this.upstream.send(Buffer.copyBytesFrom(new Uint8Array(message)), { binary: isBinary })
    to.upstreamFrames.inc()
    to.upstreamBytes.inc(message.byteLength)
  }

  pingFromClient(message: ArrayBuffer): void {
    if (this.upstream.readyState === UpstreamSocket.OPEN)
      this.upstream.ping(Buffer.copyBytesFrom(new Uint8Array(message)))
  }

  fromUpstream(data: Buffer, isBinary: boolean): void {
    const ws = this.ws
    if (ws === null || this.ending !== null) return
    // Credit spent: nothing more is delivered (nor charged) until a top-up.
    if (this.waiting !== null) return void this.held.push([data, isBinary])
    const sent = ws.send(data, isBinary)
    // 2: dropped by uWS, never delivered: not metered, and the session ends.
    if (sent === 2) return this.end(1013, 'client is not keeping up', 'backpressure')
    this.meter?.delivered(data, isBinary)
    this.bytes += data.length
    this.digest.update(data)
    to.clientFrames.inc()
    to.clientBytes.inc(data.length)
    if (ws.getBufferedAmount() > HIGH_WATER_BYTES && !this.upstream.isPaused) this.upstream.pause()
    this.checkCredit()
  }

  drained(): void {
    if (
      this.ws !== null &&
      this.waiting === null &&
      this.upstream.isPaused &&
      this.ws.getBufferedAmount() < LOW_WATER_BYTES
    )
      this.upstream.resume()
  }

  /** Spent counts unreported deltas as output tokens: the cut comes no later than the credit allows. */
  checkCredit(): void {
    if (this.ending !== null || this.waiting !== null || this.credit === null) return
    const spent = this.meter!.chargeAtomic(performance.now(), true)
    const covers = this.credit.coversAtomic
    if (spent >= covers) return this.waitForTopUp(spent)
    if (!this.asked && (covers - spent) * LOW_CREDIT_PARTS < covers) {
      this.asked = true
      this.askForCredit(spent, 'credit_low')
    }
  }

  /** Credit spent: the upstream is paused, the client asked once more, and closed unless it tops up in time. */
  waitForTopUp(spent: bigint): void {
    const waitMs = this.endpoint.websocket!.topUpWaitMs
    this.askForCredit(spent, 'credit_exhausted')
    if (waitMs === 0) return this.end(CREDIT_EXHAUSTED, 'payment required: credit exhausted', 'credit')
    if (!this.upstream.isPaused) this.upstream.pause()
    this.waitExpired = false
    this.waiting = setTimeout(() => {
      this.waitExpired = true
      // A top-up being verified when the time is up is let finish: it decides.
      if (!this.toppingUp) this.end(CREDIT_EXHAUSTED, NO_TOP_UP, 'credit')
    }, waitMs)
  }

  /** The in-band request (docs/websockets.md): the x402 WebSocket transport's 402 error shape. */
  askForCredit(spent: bigint, reason: string, id?: unknown, requiredHeader?: string): void {
    const ws = this.ws
    if (ws === null || this.credit === null) return
    const challenge = this.endpoint.quoteFor('GET', '').challenge
    const header = requiredHeader ?? v2Header(challenge, reason)
    const paymentRequired = JSON.parse(Buffer.from(header, 'base64').toString('utf8'))
    const covers = this.credit.coversAtomic
    const remaining = covers > spent ? covers - spent : 0n
    ws.send(
      JSON.stringify({
        ...(id !== undefined ? { id } : {}),
        error: { code: 402, message: reason, paymentRequired },
        metadata: {
          tollgate: {
            receipt_id: this.receiptId,
            credit_atomic: covers.toString(),
            spent_atomic: spent.toString(),
            remaining_atomic: remaining.toString(),
          },
        },
      }),
      false,
    )
  }

  /** A top-up sent on the socket: verified and held as the opening proof was; answered on the socket. */
  async topUp(request: TopUpRequest): Promise<void> {
    if (this.toppingUp) return this.answerTopUp(request.id, { ok: false, reason: 'payment_in_progress' })
    this.toppingUp = true
    const quote = this.endpoint.quoteFor('GET', '')
    let result: TopUpResult
    try {
      result = await this.credit!.topUp(request.proof, {
        endpoint: {
          id: this.endpoint.id,
          accountId: this.endpoint.accountId,
          timeoutMs: this.endpoint.target.timeoutMs,
          settleBeforeAnswer: false,
          protocols: this.endpoint.protocols,
        },
        quote,
        nowMs: Date.now(),
        client: '',
      })
    } catch (err) {
      this.deps.logger.error('websocket top-up failed', { receipt_id: this.receiptId, err })
      result = { ok: false, reason: 'verification_unavailable', status: 'unavailable' }
    }
    this.toppingUp = false
    if (this.ending !== null) return
    this.answerTopUp(request.id, result)
    if (result.ok) {
      websocketTopUps.labels('taken').inc()
      this.asked = false
      return this.resumeAfterTopUp()
    }
    websocketTopUps.labels('refused').inc()
    // Refused while waiting, and the time is up meanwhile: closed now.
    if (this.waiting !== null && this.waitExpired) this.end(CREDIT_EXHAUSTED, NO_TOP_UP, 'credit')
  }

  answerTopUp(id: unknown, result: TopUpResult): void {
    const ws = this.ws
    if (ws === null || this.credit === null) return
    const spent = this.meter!.chargeAtomic(performance.now(), true)
    if (!result.ok) return this.askForCredit(spent, result.reason, id, result.requiredHeader)
    const covers = this.credit.coversAtomic
    const receipt = result.receipt
    const paymentResponse =
      receipt !== null && receipt[0] === 'payment-response'
        ? JSON.parse(Buffer.from(receipt[1], 'base64').toString('utf8'))
        : undefined
    ws.send(
      JSON.stringify({
        id,
        result: {
          added_atomic: result.addedAtomic.toString(),
          credit_atomic: covers.toString(),
          spent_atomic: spent.toString(),
          remaining_atomic: (covers > spent ? covers - spent : 0n).toString(),
        },
        ...(paymentResponse !== undefined ? { paymentResponse } : {}),
        ...(receipt !== null && paymentResponse === undefined ? { metadata: { tollgate: { receipt } } } : {}),
      }),
      false,
    )
  }

  /** After a top-up: what was held is delivered (metered again one by one) and the upstream read again. */
  resumeAfterTopUp(): void {
    if (this.waiting === null) return this.checkCredit()
    clearTimeout(this.waiting)
    this.waiting = null
    const held = this.held
    this.held = []
    for (let i = 0; i < held.length; i++) {
      this.fromUpstream(held[i]![0], held[i]![1])
      // Spent again on the way: the rest waits for the next top-up, in order.
      if (this.waiting !== null) {
        this.held.push(...held.slice(i + 1))
        return
      }
    }
    if (
      this.ending === null &&
      this.upstream.isPaused &&
      (this.ws?.getBufferedAmount() ?? 0) < LOW_WATER_BYTES
    )
      this.upstream.resume()
  }

  /** tollgate ends the session: the client gets `code`; its close event then finishes the session. */
  end(code: number, reason: string, why: string): void {
    if (this.ending !== null) return
    this.ending = why
    if (this.upstream.readyState === UpstreamSocket.OPEN)
      this.upstream.close(code === 1009 ? 1009 : 1000, reason)
    else this.upstream.terminate()
    const ws = this.ws
    if (ws !== null) ws.end(code, reason)
    else this.finish()
  }

  upstreamClosed(code: number, reason: string): void {
    if (this.ending !== null) return
    this.ending = 'upstream'
    const ws = this.ws
    if (ws === null) return this.finish()
    const sendable = sendableCode(code)
    if (sendable === null) ws.end()
    else ws.end(sendable, reason)
  }

  /** uWS: the client socket is closed (by the client, or by end()). */
  clientClosed(code: number, message: ArrayBuffer): void {
    this.ws = null
    if (this.ending === null) {
      this.ending = 'client'
      const sendable = sendableCode(code)
      if (this.upstream.readyState === UpstreamSocket.OPEN)
        this.upstream.close(sendable ?? 1000, Buffer.from(message).toString('utf8'))
      else this.upstream.terminate()
    }
    this.finish()
  }

  /** Once: the session's one call row, charged what it delivered; the rest of the payment is refunded. */
  finish(): void {
    if (this.finished) return
    this.finished = true
    // A pass session's timer is a timeout, a metered one's an interval: either clear clears it.
    if (this.timer !== null) clearInterval(this.timer)
    if (this.window !== null) clearTimeout(this.window)
    if (this.waiting !== null) clearTimeout(this.waiting)
    this.held = []
    websocketSessionsOpen.dec()
    websocketSessions.labels(this.ending ?? 'client').inc()
    if (this.credit === null) return this.finishPass()
    const usage = this.meter!.finish(performance.now(), this.credit.coversAtomic, this.ending !== 'upstream')
    const endpoint = this.endpoint
    this.credit.capture(
      {
        endpointId: endpoint.id,
        accountId: endpoint.accountId,
        ownerWallet: endpoint.ownerWallet,
        method: 'GET',
        pricingModel: 'usage',
        status: 101,
        tool: null,
      },
      usage,
      { sha256: this.digest.digest('hex'), bytes: this.bytes },
      this.ending ?? 'client',
    )
    websocketChargedAtomic.inc(Number(usage.chargeAtomic))
  }

  /** A pass session's end: its use recorded served (its receipt on the draw) as a signed-in call's is. */
  finishPass(): void {
    const endpoint = this.endpoint
    this.pass!.use.capture({
      endpointId: endpoint.id,
      accountId: endpoint.accountId,
      ownerWallet: endpoint.ownerWallet,
      method: 'GET',
      pricingModel: endpoint.pricingModel,
      callId: `call_${this.receiptId.slice(5)}`,
      status: 101,
      chargeAtomic: 0n,
      usage: null,
      receiptId: this.receiptId,
      tool: null,
    })
    callsCaptured.inc()
  }
}

/** A close code one may send (1005, 1006 and 1015 are only ever reported): else null. */
function sendableCode(code: number): number | null {
  if (code >= 3000 && code <= 4999) return code
  if (code >= 1000 && code <= 1014 && code !== 1004 && code !== 1005 && code !== 1006) return code
  return null
}
