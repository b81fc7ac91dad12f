// What the metered route (metered.ts) is given: its parts, and the features this process offers. A feature
// left out here is one no call reads or builds anything for.

import type { Logger } from '../observability/logger.ts'
import type { SchemeRegistry } from '../schemes/registry.ts'
import type { ProofEdge } from './app.ts'
import type { MeteredIdentity } from './call-identity.ts'
import type { EndpointCache } from './endpoint-cache.ts'
import type { ObservedCalls } from './observed-calls.ts'
import type { PaidAnswers } from './paid-answers.ts'
import type { PassUses } from './pass-uses.ts'
import type { UpstreamDispatcher } from './proxy.ts'
import type { ReceiptSigner } from './receipt-signer.ts'

export type { MeteredIdentity } from './call-identity.ts'

export interface MeteredDeps {
  /** Rate limits: who the client is, and the charge for a proof that did not pay; absent in some tests. */
  edge?: ProofEdge
  endpoints: EndpointCache
  /** The ways to pay (src/schemes/): what a 402 offers, who verifies a payment, claims, settles, receipts. */
  schemes: SchemeRegistry
  dispatcher: UpstreamDispatcher
  logger: Logger
  /** Counts what paid calls did, for the discovery listing (absent in tests of other parts). */
  observed?: ObservedCalls
  /** Signs the receipt on a paid answer (x402 offer-receipt) and digests the body it delivers. */
  receipts?: { signer: ReceiptSigner; network: string }
  /** The `payment-identifier` extension's kept answers; absent: the extension is not read. */
  paidAnswers?: PaidAnswers
  /** Passes: a signed-in call (sign-in-with-x) draws one use; absent: passes are not honoured. */
  passes?: PassUses
  /** database.require_synchronous_standby (src/db/replication-watch.ts): non-null refuses every paid call. */
  replication?: { readonly refusing: string | null }
  /** Web Bot Auth (src/identity/): verifies a signed call to an endpoint with identity rules; absent: every
   * such call is unsigned. */
  identity?: MeteredIdentity
  settings: {
    quoteTtlMs: number
    maxBufferedBodyBytes: number
    /** Usage-priced answers held whole to settle their charge before the head: at most this many bytes. */
    heldAnswerMaxBytes?: number
  }
}
