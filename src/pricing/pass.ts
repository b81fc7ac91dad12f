// The `pass` an endpoint may sell ("pay once, access many"): N calls, T seconds, or both, at one price. Its
// valibot schema (validation and OpenAPI), its reading into base units with errors that name the field, and
// the stored form both planes read (the control plane writes it, the data plane compiles its 402 from it).
import * as v from 'valibot'
import { parseDollars, toDollars } from '../money.ts'

/** At most this many calls in one pass, and at most a year of time. */
export const PASS_CALLS_MAX = 1_000_000
export const PASS_DURATION_MAX_S = 366 * 24 * 3600

export const PassInput = v.pipe(
  v.strictObject({
    price: v.union([v.number(), v.string()], 'must be a number or decimal string'),
    calls: v.optional(
      v.pipe(
        v.number('must be a number'),
        v.integer('must be an integer'),
        v.minValue(1, 'must be at least 1'),
        v.maxValue(PASS_CALLS_MAX, `must be at most ${PASS_CALLS_MAX}`),
      ),
    ),
    duration_s: v.optional(
      v.pipe(
        v.number('must be a number'),
        v.integer('must be an integer'),
        v.minValue(60, 'must be at least 60 (one minute)'),
        v.maxValue(PASS_DURATION_MAX_S, `must be at most ${PASS_DURATION_MAX_S} (a year)`),
      ),
    ),
  }),
  v.description(
    'A pass this endpoint sells: `calls` calls, `duration_s` seconds, or both (whichever ends first), for ' +
      '`price`. Bought at {host}/pass/{endpoint_id} with any way this endpoint takes; then used by signing ' +
      'in with the paying wallet (x402 sign-in-with-x). null: no pass.',
  ),
)
export type PassInput = v.InferOutput<typeof PassInput>

export const PassObject = v.nullable(
  v.strictObject({
    price: v.number(),
    price_atomic: v.string(),
    calls: v.nullable(v.number()),
    duration_s: v.nullable(v.number()),
    purchase_url: v.pipe(v.string(), v.description('{host}/pass/{endpoint_id}: pay the pass price here')),
  }),
)

/** As stored in endpoints.pass (jsonb): amounts as decimal text of base units. */
export interface StoredPass {
  price_atomic: string
  calls: number | null
  duration_s: number | null
}

export interface Pass {
  priceAtomic: bigint
  calls: number | null
  durationS: number | null
}

export class PassError extends Error {
  constructor(
    message: string,
    readonly param: string,
  ) {
    super(message)
  }
}

/** The input read into base units; `maxAtomic` bounds the price as it bounds a call's. */
export function readPass(input: PassInput, maxAtomic: bigint): Pass {
  const price = parseDollars(input.price, maxAtomic)
  if (!price.ok) throw new PassError(`pass.price ${price.reason}`, 'pass.price')
  if (input.calls === undefined && input.duration_s === undefined)
    throw new PassError('a pass needs calls, duration_s, or both', 'pass')
  return { priceAtomic: price.atomic, calls: input.calls ?? null, durationS: input.duration_s ?? null }
}

export function passToStored(p: Pass): StoredPass {
  return { price_atomic: p.priceAtomic.toString(), calls: p.calls, duration_s: p.durationS }
}

export function passFromStored(s: StoredPass): Pass {
  return { priceAtomic: BigInt(s.price_atomic), calls: s.calls, durationS: s.duration_s }
}

export function presentPass(p: Pass, purchaseUrl: string): v.InferOutput<typeof PassObject> {
  return {
    price: toDollars(p.priceAtomic),
    price_atomic: p.priceAtomic.toString(),
    calls: p.calls,
    duration_s: p.durationS,
    purchase_url: purchaseUrl,
  }
}
