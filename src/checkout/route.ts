// /pay/:payment_id: the hosted checkout for browsers (page, status polling, QR) and the 402 flow for agents
// (GET → requirement, POST with x-payment → paid). The uWS request is read synchronously, onAborted is set
// before the first await, and every answer after an await is corked (responder.ts).
import { LRUCache } from 'lru-cache'
import QRCode from 'qrcode'
import { priceDue } from '../books/payments.ts'
import type { UwsRoute } from '../data-plane/app.ts'
import { type CheckoutPaymentRow, effectiveStatus, findCheckoutPayment } from '../db/payments.ts'
import { paymentRequired } from '../observability/metrics.ts'
import { exactOffer } from '../schemes/exact/offer.ts'
import { buildChallenge, v2Header } from '../wire/challenge.ts'
import type { CheckoutContext, CheckoutDeps } from './context.ts'
import { loadCheckoutPages, MESSAGE_CSP, PAGE_CSP } from './page.ts'
import { payWithProof } from './pay.ts'
import { type CheckoutView, eip681, networkLabel, pageValues, presentCheckout } from './presenter.ts'
import {
  type CheckoutRequest,
  createResponder,
  HTML_TYPE,
  JSON_TYPE,
  type Responder,
  readRequest,
  stateCode,
} from './responder.ts'

const PAYMENT_ID = /^pay_[0-9A-Za-z]{1,64}$/
const ASSET_CACHE = 'public, max-age=31536000, immutable'
const PAGE_HEADERS: Array<[string, string]> = [
  ['content-security-policy', PAGE_CSP],
  ['referrer-policy', 'no-referrer'],
  ['x-frame-options', 'DENY'],
]

export function createCheckoutRoute(deps: CheckoutDeps): UwsRoute {
  const ctx = createCheckoutContext(deps)
  return (res, req) => {
    const request = readRequest(req)
    if (request.proofHeader !== '' && deps.edge !== undefined) request.client = deps.edge.clientKey(res, req)
    const r = createResponder(res, request, deps.logger)
    handle(ctx, request, r)
  }
}

function handle(ctx: CheckoutContext, req: CheckoutRequest, r: Responder): void {
  if (req.id === 'assets') return serveAsset(ctx, req, r)
  if (!PAYMENT_ID.test(req.id)) return ctx.sendNotFound(r, req)
  const isRoot = req.rest === '' || req.rest === '/'
  const allowed = isRoot ? req.method === 'GET' || req.method === 'POST' : req.method === 'GET'
  if (!allowed && (isRoot || req.rest === '/status' || req.rest === '/qr.svg')) {
    return r.sendError('method_not_allowed', `${req.method} is not allowed here`, undefined, [
      ['allow', isRoot ? 'GET, POST' : 'GET'],
    ])
  }
  findCheckoutPayment(ctx.deps.sql, req.id).then(
    (p) => {
      if (r.aborted) return
      if (!p) {
        if (req.proofHeader) ctx.deps.edge?.proofRefused(req.client)
        return ctx.sendNotFound(r, req)
      }
      dispatch(ctx, req, r, p, isRoot)
    },
    (err) => ctx.fail(r, err, req.id),
  )
}

function dispatch(
  ctx: CheckoutContext,
  req: CheckoutRequest,
  r: Responder,
  p: CheckoutPaymentRow,
  isRoot: boolean,
) {
  if (req.rest === '/status') return r.send(200, JSON_TYPE, JSON.stringify(presentCheckout(p, ctx.view())))
  if (req.rest === '/qr.svg') return sendQr(ctx, r, p)
  if (!isRoot) return r.sendError('route_not_found', `no route ${req.method} /pay/${req.id}${req.rest}`)
  if (req.proofHeader) {
    // A proof applied here and forgotten by a failover could pay this payment (already fulfilled) again,
    // or another one: not taken while required replication is unsafe.
    if (ctx.deps.replication?.refusing)
      return r.sendError('replication_unsafe', undefined, undefined, [['retry-after', '30']])
    return payWithProof(ctx, r, p, req.proofHeader, req.client)
  }
  if (req.method === 'GET' && req.wantsHtml) return sendPage(ctx, r, p)
  ctx.sendState(r, p)
}

function serveAsset(ctx: CheckoutContext, req: CheckoutRequest, r: Responder): void {
  const asset = ctx.pages.assets.get(req.rest.slice(1))
  if (!asset || req.method !== 'GET') return r.sendError('route_not_found', `no asset ${req.rest}`)
  r.send(200, asset.type, asset.body, [], ASSET_CACHE)
}

function sendQr(ctx: CheckoutContext, r: Responder, p: CheckoutPaymentRow): void {
  const s = presentCheckout(p, ctx.view())
  if (s.status !== 'pending') return r.sendError(stateCode(s.status), 'nothing is due')
  ctx.qrSvg(eip681(ctx.view(), BigInt(s.amount_due_atomic))).then(
    (svg) => r.send(200, 'image/svg+xml', svg),
    (err) => ctx.fail(r, err, p.id),
  )
}

function sendPage(ctx: CheckoutContext, r: Responder, p: CheckoutPaymentRow): void {
  const view = ctx.view()
  const s = presentCheckout(p, view)
  const qr =
    s.status === 'pending' ? ctx.qrSvg(eip681(view, BigInt(s.amount_due_atomic))) : Promise.resolve('')
  qr.then(
    (svg) => {
      const boot = {
        status: s,
        network_label: view.networkLabel,
        status_url: `/pay/${s.id}/status`,
        pay_url: `/pay/${s.id}`,
        qr_url: `/pay/${s.id}/qr.svg`,
        poll_ms: ctx.deps.settings.pollIntervalMs ?? 2000,
        // A pasted hash the chain does not know is said to be unknown after this long, not waited for forever.
        unknown_hash_after_ms: 12_000,
        pending_hash_after_ms: 90_000,
      }
      const html = ctx.pages.renderPayment({ ...pageValues(s, view, svg), boot: JSON.stringify(boot) })
      r.send(s.status === 'expired' || s.status === 'canceled' ? 410 : 200, HTML_TYPE, html, PAGE_HEADERS)
    },
    (err) => ctx.fail(r, err, p.id),
  )
}

export function createCheckoutContext(deps: CheckoutDeps): CheckoutContext {
  const { chain } = deps
  const label = networkLabel(chain.network)
  const qrCache = new LRUCache<string, Promise<string>>({ max: 1_000 })
  const view = (): CheckoutView => ({
    publicUrl: deps.publicUrl(),
    network: chain.network,
    chainId: chain.chainId,
    treasury: chain.treasury,
    usdcAddress: chain.usdcAddress,
    explorerUrl: chain.explorerUrl,
    networkLabel: label,
    testMode: chain.network !== 'base',
  })
  const ctx: CheckoutContext = {
    deps,
    pages: loadCheckoutPages(),
    view,
    qrSvg(uri) {
      let svg = qrCache.get(uri)
      if (!svg) {
        svg = QRCode.toString(uri, { type: 'svg', errorCorrectionLevel: 'L', margin: 1 })
        qrCache.set(uri, svg)
      }
      return svg
    },
    sendRequirement(r, p, reason, extra = {}) {
      paymentRequired.labels(reason).inc()
      const v = view()
      const s = presentCheckout(p, v)
      const offer = x402Offer(chain, p, `${v.publicUrl}/pay/${p.id}`)
      const headers: Array<[string, string]> = [['payment-required', v2Header(offer.challenge, reason)]]
      // The same amount as an MPP challenge, fresh per answer (its id is the nonce the payer signs).
      const mpp = deps.mpp?.offer(priceDue(p), X402_MAX_TIMEOUT_S * 1000)
      if (mpp !== undefined) headers.push(['www-authenticate', mpp.header(Date.now())])
      r.send(
        402,
        JSON_TYPE,
        JSON.stringify({ ...requirement(s, reason, r.requestId, extra), ...offer.body }),
        headers,
      )
    },
    sendState(r, p) {
      const s = presentCheckout(p, view())
      if (s.status === 'pending') return ctx.sendRequirement(r, p, 'payment_required')
      if (s.status === 'paid') return r.send(200, JSON_TYPE, JSON.stringify(s))
      r.sendError(stateCode(s.status), `payment ${p.id} is ${s.status} and cannot be paid`, { payment: s })
    },
    sendNotFound(r, req) {
      if (req.wantsHtml && req.rest.length <= 1) {
        return r.send(404, HTML_TYPE, ctx.pages.renderNotFound(), [
          ['content-security-policy', MESSAGE_CSP],
          ['referrer-policy', 'no-referrer'],
        ])
      }
      r.sendError('payment_not_found', `no payment ${req.id}`)
    },
    fail(r, err) {
      r.failed(err)
      r.sendError(
        'service_unavailable',
        'the payment could not be processed; retry shortly with the same proof',
      )
    },
  }
  return ctx
}

/** How long an x402 client may make its authorization valid for (the metered default). */
const X402_MAX_TIMEOUT_S = 300

/**
 * The x402 `exact` offer for what is still due: the price less what was received (the figure's offset only
 * tags plain transfers). Built by the metered 402's own builder: v1 `x402Version` + `accepts` for the body,
 * the v2 PAYMENT-REQUIRED header from the same challenge.
 */
function x402Offer(chain: CheckoutDeps['chain'], p: CheckoutPaymentRow, resourceUrl: string) {
  const challenge = buildChallenge({
    resourceUrl,
    description: p.description,
    idField: 'payment_id',
    id: p.id,
    offers: [exactOffer(chain, priceDue(p), X402_MAX_TIMEOUT_S)],
  })
  const fields = JSON.parse(`{${challenge.rest.slice(1)}`) as { x402Version: number; accepts: unknown[] }
  return { challenge, body: { x402Version: fields.x402Version, accepts: fields.accepts } }
}

/**
 * The checkout's 402: the seed's fields (price = the exact figure to send now, recipient, asset, network),
 * how to pay, and the x402 fields (added by sendRequirement) so an x402 client pays it unchanged.
 */
function requirement(
  s: ReturnType<typeof presentCheckout>,
  reason: string,
  requestId: string,
  extra: Record<string, unknown>,
) {
  return {
    error: reason,
    request_id: requestId,
    payment_id: s.id,
    price: s.amount_due,
    price_atomic: s.amount_due_atomic,
    recipient: s.recipient,
    currency: 'USDC',
    asset: s.asset,
    network: s.network,
    chain_id: s.chain_id,
    expires_at: s.expires_at,
    payment_status: effectiveStatus({ status: s.status, expires_at: new Date(s.expires_at) }),
    amount_received_atomic: s.amount_received_atomic,
    how_to_pay:
      'send exactly price_atomic base units of asset to recipient on this chain (it is detected by its amount), ' +
      'or POST this URL with header x-payment: <transaction hash>, ' +
      'or pay the x402 `exact` offer in accepts / PAYMENT-REQUIRED with any x402 client, ' +
      'or the MPP `evm` charge in WWW-Authenticate with any MPP client',
    ...extra,
  }
}
