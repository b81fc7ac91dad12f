// What the checkout's route and its pay flow share: its dependencies and the context built once from them
// (route.ts builds it, pay.ts uses it; neither imports the other for it).
import type { HttpRequest, HttpResponse } from '../data-plane/uws.ts'
import type { CheckoutPaymentRow } from '../db/payments.ts'
import type { Sql } from '../db/sql.ts'
import type { Logger } from '../observability/logger.ts'
import type { MppBinding } from '../schemes/mpp-charge/binding.ts'
import type { Verifier } from '../schemes/verifier.ts'
import type { CheckoutPages } from './page.ts'
import type { CheckoutView } from './presenter.ts'
import type { CheckoutRequest, Responder } from './responder.ts'

export interface CheckoutDeps {
  sql: Sql
  verifier: Verifier
  chain: {
    network: string
    chainId: number
    treasury: string
    usdcAddress: string
    explorerUrl: string | null
    /** What an x402 `exact` offer names (the metered 402's own fields). */
    x402Network: string
    caip2: string
    usdcName: string
    usdcVersion: string
  }
  publicUrl(): string
  logger: Logger
  settings: {
    ownerShareBps: number
    pollIntervalMs?: number
    /** How long POST /pay/:id with an x402 authorization waits for its settlement before answering 202. */
    x402SettleWaitMs?: number
  }
  /** database.require_synchronous_standby (src/db/replication-watch.ts): non-null refuses every proof. */
  replication?: { readonly refusing: string | null }
  /** The MPP `evm` charge challenge beside x402's, and the check of its credential; absent: not offered. */
  mpp?: MppBinding
  /** Rate limits: who the client is, and the charge for a proof that did not pay; absent in some tests. */
  edge?: {
    clientKey(res: HttpResponse, req: HttpRequest): string
    proofRefused(client: string): void
  }
}

/** What every request of the checkout shares, built once. */
export interface CheckoutContext {
  deps: CheckoutDeps
  pages: CheckoutPages
  view(): CheckoutView
  qrSvg(uri: string): Promise<string>
  /** 402 for a pending payment: how to pay it (a transfer, its hash, an x402 `exact` authorization, an MPP charge). */
  sendRequirement(r: Responder, p: CheckoutPaymentRow, reason: string, extra?: Record<string, unknown>): void
  /** 200 paid, 410 expired or canceled, 402 pending. */
  sendState(r: Responder, p: CheckoutPaymentRow): void
  sendNotFound(r: Responder, req: CheckoutRequest): void
  fail(r: Responder, err: unknown, id: string): void
}
