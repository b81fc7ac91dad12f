// What a facilitator catalogs (the published @x402/extensions bazaar code) from a payment that echoes a 402:
// the published client copies the resource and the extensions into its payload.
import type { PaymentRequired } from '@x402/core/types'
import { extractDiscoveryInfo } from '@x402/extensions/bazaar'

export function catalogedFrom(required: PaymentRequired) {
  return extractDiscoveryInfo(
    {
      x402Version: 2,
      resource: required.resource,
      accepted: required.accepts[0]!,
      payload: {},
      extensions: required.extensions,
    },
    required.accepts[0]!,
  )
}
