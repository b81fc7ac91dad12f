// The schemes this process accepts, in the order they read payments: the hot path asks the registry what an
// endpoint's 402 offers and which scheme verifies a payment, and never names a scheme itself.

import type { Config } from '../config/schema.ts'
import type { ReadinessCheck } from '../observability/admin.ts'
import type { Proof } from '../wire/proof.ts'
import type { Offer, OfferQuery, PayQuery, Scheme, SchemeDeps, SchemeFactory, Verdict } from './scheme.ts'
import { schemeSettings } from './settings.ts'

export interface Offers {
  offers: Offer[]
  notOffered: Array<{ scheme: string; reason: string }>
}

export class SchemeRegistry {
  constructor(readonly schemes: readonly Scheme[]) {}

  /** Builds each scheme from the shared parts and the settings decided here, once, from `config`. */
  static async build(
    factories: readonly SchemeFactory[],
    { config, ...parts }: Omit<SchemeDeps, 'settings'> & { config: Config },
  ): Promise<SchemeRegistry> {
    const deps: SchemeDeps = { ...parts, settings: schemeSettings(config, parts.chain.devChain) }
    const schemes: Scheme[] = []
    for (const factory of factories) {
      const scheme = await factory(deps)
      if (scheme !== null) schemes.push(scheme)
    }
    return new SchemeRegistry(schemes)
  }

  /** Every scheme's part of the 402 for one endpoint and price, and the ones that say why they are absent. */
  offers(q: OfferQuery): Offers {
    const out: Offers = { offers: [], notOffered: [] }
    const x402 = q.protocols === undefined || q.protocols.has('x402')
    const mpp = q.protocols === undefined || q.protocols.has('mpp')
    for (const scheme of this.schemes) {
      const offer = scheme.offer(q)
      if (offer === null) continue
      if ('notOffered' in offer) {
        out.notOffered.push({ scheme: scheme.name, reason: offer.notOffered })
        continue
      }
      // A protocol the owner turned off is not offered: its parts of each scheme's offer are left out.
      const kept: Offer = {
        ...(offer.body ? { body: offer.body } : {}),
        ...(x402 && offer.v1 ? { v1: offer.v1 } : {}),
        ...(x402 && offer.v2 ? { v2: offer.v2 } : {}),
        // x402 extensions belong to its v2 requirement: gone with it.
        ...(x402 && offer.v2 && offer.extensions ? { extensions: offer.extensions } : {}),
        ...(mpp && offer.mpp ? { mpp: offer.mpp } : {}),
      }
      if (kept.body || kept.v1 || kept.v2 || kept.mpp) out.offers.push(kept)
    }
    return out
  }

  /** The first scheme that reads the payment verifies it; a payment nobody reads is not a proof. */
  verify(proof: Proof, q: PayQuery): Verdict | Promise<Verdict> {
    // A payment in a protocol the endpoint turned off is refused before any scheme looks at it.
    const protocols = q.endpoint.protocols
    if (protocols !== undefined) {
      if (proof.kind === 'x402' && !protocols.has('x402'))
        return { ok: false, reason: 'protocol_not_accepted' }
      if (proof.kind === 'mpp' && !protocols.has('mpp')) return { ok: false, reason: 'protocol_not_accepted' }
    }
    for (const scheme of this.schemes) {
      if (scheme.reads(proof)) return scheme.verify(proof, q)
    }
    return { ok: false, reason: 'invalid_proof' }
  }

  readiness(): ReadinessCheck[] {
    return this.schemes.flatMap((s) => [...(s.readiness ?? [])])
  }

  async flush(): Promise<void> {
    for (const scheme of this.schemes) await scheme.flush?.()
  }

  async stop(): Promise<void> {
    for (const scheme of this.schemes) await scheme.stop?.()
  }
}
