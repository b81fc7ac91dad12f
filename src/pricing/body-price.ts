// Prices that depend on what the request says, not only where it goes (an MCP `tools/call` names its tool
// in the JSON-RPC body): the endpoint reads the whole body, bounded, before it answers 402 or forwards.

import type { MppProblem } from '../schemes/mpp-charge/problems.ts'
import type { Quote } from '../schemes/scheme.ts'
import type { UsagePricing } from './model.ts'

export type BodyPrice =
  /** Forwarded without payment (a protocol method, a free tool); `rewriter` changes its answer. */
  | { ok: 'free'; rewriter?: () => AnswerRewriter }
  /**
   * Paid at this quote. `label` names what was bought on the call row (a tool name); `metricLabel` is the
   * label of the revenue metric, from a bounded set (names the merchant configured, else "other").
   */
  | {
      ok: 'priced'
      quote: Quote
      usage: UsagePricing | null
      model: 'fixed' | 'usage'
      label: string
      metricLabel: string
      /** What discovery counts the call under (a tool the merchant priced or the server listed, else "other"). */
      observedLabel: string
      /** A payment carried in the body, as a payment header would carry it; null: read the headers. */
      payment: string | null
      /** The body to forward instead (the payment taken out of it); null: as received. */
      forwardBody: Buffer | null
      /**
       * Answers this request's refusals itself (given the x402 v2 PaymentRequired JSON, the MPP
       * WWW-Authenticate value, null when MPP is not offered, and how MPP names the refusal of the MPP
       * credential the request carried, else null); null: HTTP 402.
       */
      paymentRequired:
        | ((
            paymentRequiredJson: string,
            mppChallenge: string | null,
            mppProblem: MppProblem | null,
          ) => BodyAnswer)
        | null
      /** Puts the payment's receipt into the answer (given the settlement JSON); null: headers only. */
      receiptInAnswer: ((settlementJson: string) => AnswerRewriter) | null
    }
  /** Refused before anything is forwarded: the status line and body to answer (e.g. a JSON-RPC error). */
  | ({ ok: 'refused' } & BodyAnswer)

export interface BodyAnswer {
  status: string
  contentType: string
  body: string
}

/** Rewrites an answer on its way out (its length changes: it is sent unsized). */
export interface AnswerRewriter {
  /** The upstream's head (content-type). */
  onHead(head: Buffer[]): void
  onData(chunk: Buffer): Buffer
  onEnd(): Buffer | null
  /** Given a way to write onto the client's answer between the upstream's bytes (a stream's events). */
  attach?(push: (bytes: Buffer) => boolean): void
  /** The answer is over (ended, failed, or the client left). */
  close?(): void
}

/** Where a body-priced request goes and what it accepts (an MCP session is found by its URL). */
export interface BodyRequestPlace {
  endpointId: string
  /** The path and query after /m/<id>. */
  pathAndQuery: string
  /** The upstream's origin and the endpoint's base path. */
  origin: string
  basePath: string
  /** The request's Accept header ('' when absent), and whether it named an MCP session (Mcp-Session-Id). */
  accept: string
  mcpSession: boolean
}

export interface BodyPricing {
  /** The most of a body read to price it; a longer one is refused with 413 and nothing forwarded. */
  maxBytes: number
  price(method: string, body: Buffer | null, at?: BodyRequestPlace): BodyPrice
  /** The quote a call of this tool pays (null: it passes free), for the discovery listing. */
  quoteOf(tool: string): Quote | null
}
