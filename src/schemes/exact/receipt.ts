// The payment receipt on a served call, in the x402 version the payer spoke.
// v1: X-PAYMENT-RESPONSE, network by name, as the `x402` package reads it.
// v2: PAYMENT-RESPONSE (which @x402/fetch reads first), network as CAIP-2. An EIP-3009 authorization not
// settled before the answer (an endpoint set to "after", a process without a settler slot, a settlement that
// failed) says so with @x402/core's own non-terminal reason `settlement_pending` (success false, transaction
// ""), in either version: never `success: true` without a transaction, which @x402/core reads as "settled"
// (x402HTTPClient.parsePaymentResult).
// Settled before the answer (the endpoint's x402_settlement): `success: true` only once the transaction is
// mined and the token logged this authorization used in it, with that transaction's hash, as the reference
// facilitator's settle answers; sent but not mined within the wait, `settlement_pending` WITH the hash (the
// meaning @x402/core gives that reason: a broadcast transaction, still pending).
import type { VerifyResult } from '../verifier.ts'
import type { EarlySettlement } from './settle-before-answer.ts'

type Paid = Extract<VerifyResult, { ok: true; kind: 'eip3009' }>

export interface ReceiptNetworks {
  /** x402 v1 network name ('base-sepolia'). */
  network: string
  /** CAIP-2 id ('eip155:84532'). */
  caip2: string
}

const PENDING_MESSAGE =
  'the authorization is verified and its nonce claimed; tollgate settles it on chain in its next batch'
const NOT_CHARGED_MESSAGE =
  'the upstream failed: nothing was charged, and the same payment may be retried within the retry window'

/** [header name, base64 JSON]; `served`: the upstream answered below 500 and the call is captured. */
export function paymentReceipt(
  paid: Paid,
  served: boolean,
  networks: ReceiptNetworks,
  early: EarlySettlement | null = null,
): [string, string] {
  if (served && early !== null && early.state !== 'unsent') return earlyReceipt(paid, networks, early)
  const reason = served ? 'settlement_pending' : 'upstream_failed'
  const message = served ? PENDING_MESSAGE : NOT_CHARGED_MESSAGE
  if (paid.x402Version === 1) {
    // v1 too: no `success: true` without the transaction that settled it. The v1 clients (x402-fetch,
    // x402-axios) never read this header themselves; decodeXPaymentResponse only parses it, so a caller
    // reading `success` sees false and the reason, not a false "paid".
    const json = `{"success":false,"errorReason":"${reason}","errorMessage":"${message}","transaction":"","network":"${networks.network}","payer":"${paid.payer}"}`
    return ['x-payment-response', Buffer.from(json).toString('base64')]
  }
  const json = `{"success":false,"errorReason":"${reason}","errorMessage":"${message}","transaction":"","network":"${networks.caip2}","payer":"${paid.payer}","amount":"${paid.valueAtomic}"}`
  return ['payment-response', Buffer.from(json).toString('base64')]
}

const SENT_MESSAGE =
  'the authorization is in the named transaction, broadcast before this answer and not yet mined'

function earlyReceipt(
  paid: Paid,
  networks: ReceiptNetworks,
  early: Exclude<EarlySettlement, { state: 'unsent' }>,
): [string, string] {
  const v1 = paid.x402Version === 1
  const network = v1 ? networks.network : networks.caip2
  const tail = `"transaction":"${early.transaction}","network":"${network}","payer":"${paid.payer}"${v1 ? '' : `,"amount":"${paid.valueAtomic}"`}`
  const json =
    early.state === 'settled'
      ? `{"success":true,${tail}}`
      : `{"success":false,"errorReason":"settlement_pending","errorMessage":"${SENT_MESSAGE}",${tail}}`
  return [v1 ? 'x-payment-response' : 'payment-response', Buffer.from(json).toString('base64')]
}
