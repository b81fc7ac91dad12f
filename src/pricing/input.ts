// The `pricing` object of the management API: its valibot schema (shapes and field names, for validation and
// OpenAPI) and its reading into base units (amounts, ceilings, the fields each unit needs), with errors that
// name the field at fault.
import * as v from 'valibot'
import { parseDollars, toDollars } from '../money.ts'
import type { OnMissingUsage, PriceRule, Pricing, UsagePricing } from './model.ts'

const Amount = v.union([v.number(), v.string()], 'must be a number or decimal string')
const HTTP_METHODS = ['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS'] as const

export const RULES_MAX = 50

const Fixed = v.strictObject({ model: v.literal('fixed'), price: v.optional(Amount) })
const Rule = v.strictObject({
  method: v.optional(v.nullable(v.picklist(HTTP_METHODS, `must be one of ${HTTP_METHODS.join(', ')}`))),
  path_prefix: v.pipe(
    v.string('must be a string'),
    v.startsWith('/', 'must start with /'),
    v.maxLength(512, 'must be at most 512 characters'),
  ),
  price: Amount,
})
const Rules = v.strictObject({
  model: v.literal('rules'),
  rules: v.pipe(
    v.array(Rule, 'must be an array'),
    v.minLength(1, 'must hold at least one rule'),
    v.maxLength(RULES_MAX, `must hold at most ${RULES_MAX} rules`),
  ),
  default_price: Amount,
})
const Usage = v.strictObject({
  model: v.literal('usage'),
  unit: v.picklist(
    ['response_bytes', 'duration_ms', 'tokens'],
    'must be response_bytes, duration_ms or tokens',
  ),
  max_price: Amount,
  price_per_mb: v.optional(Amount),
  price_per_second: v.optional(Amount),
  input_price_per_million: v.optional(Amount),
  output_price_per_million: v.optional(Amount),
  cached_input_price_per_million: v.optional(Amount),
  on_missing_usage: v.optional(
    v.picklist(['max_price', 'response_bytes', 'nothing'], 'must be max_price, response_bytes or nothing'),
  ),
})

export const PricingInput = v.pipe(
  v.variant('model', [Fixed, Rules, Usage], 'must be fixed, rules or usage'),
  v.description(
    'How a call is priced. fixed: `price` per call. rules: the first rule whose method and path prefix match ' +
      'the request, else default_price. usage: the 402 offers max_price; the charge is measured (unit ' +
      'response_bytes: price_per_mb; duration_ms: price_per_second; tokens: input/output/cached-input price ' +
      'per million tokens from the answer’s usage object), never above max_price. on_missing_usage (tokens): ' +
      'max_price (default), response_bytes (needs price_per_mb) or nothing.',
  ),
)
export type PricingInput = v.InferOutput<typeof PricingInput>

/** An input error, naming the field (`pricing.max_price`, `pricing.rules[2].price`). */
export class PricingError extends Error {
  constructor(
    message: string,
    readonly param: string,
  ) {
    super(message)
  }
}

/** Reads a valid shape into base units; `maxPriceAtomic` bounds every per-call price and ceiling. */
export function readPricing(input: PricingInput, priceFallback: unknown, maxPriceAtomic: bigint): Pricing {
  if (input.model === 'fixed') {
    const raw = input.price ?? priceFallback
    if (raw === undefined) throw new PricingError('pricing.price (or price) is required', 'pricing.price')
    return { model: 'fixed', priceAtomic: perCall(raw, 'pricing.price', maxPriceAtomic) }
  }
  if (input.model === 'rules') {
    const rules: PriceRule[] = input.rules.map((r, i) => ({
      method: r.method ?? null,
      pathPrefix: r.path_prefix,
      priceAtomic: perCall(r.price, `pricing.rules[${i}].price`, maxPriceAtomic),
    }))
    return {
      model: 'rules',
      rules,
      defaultAtomic: perCall(input.default_price, 'pricing.default_price', maxPriceAtomic),
    }
  }
  return readUsage(input, maxPriceAtomic)
}

function readUsage(input: Extract<PricingInput, { model: 'usage' }>, maxPriceAtomic: bigint): UsagePricing {
  const rate = (raw: unknown, field: string) => (raw === undefined ? null : amount(raw, `pricing.${field}`))
  const perMb = rate(input.price_per_mb, 'price_per_mb')
  const perSecond = rate(input.price_per_second, 'price_per_second')
  const inputRate = rate(input.input_price_per_million, 'input_price_per_million')
  const outputRate = rate(input.output_price_per_million, 'output_price_per_million')
  const cachedRate = rate(input.cached_input_price_per_million, 'cached_input_price_per_million')
  const onMissing: OnMissingUsage = input.on_missing_usage ?? 'max_price'
  const need = (value: bigint | null, field: string, why: string) => {
    if (value === null) throw new PricingError(`pricing.${field} is required ${why}`, `pricing.${field}`)
  }
  if (input.unit === 'response_bytes') need(perMb, 'price_per_mb', 'for unit response_bytes')
  if (input.unit === 'duration_ms') need(perSecond, 'price_per_second', 'for unit duration_ms')
  if (input.unit === 'tokens') {
    need(inputRate, 'input_price_per_million', 'for unit tokens')
    need(outputRate, 'output_price_per_million', 'for unit tokens')
    if (onMissing === 'response_bytes') need(perMb, 'price_per_mb', 'when on_missing_usage is response_bytes')
  }
  return {
    model: 'usage',
    unit: input.unit,
    maxAtomic: perCall(input.max_price, 'pricing.max_price', maxPriceAtomic),
    perMbAtomic: perMb,
    perSecondAtomic: perSecond,
    inputPerMillionAtomic: inputRate,
    outputPerMillionAtomic: outputRate,
    cachedInputPerMillionAtomic: cachedRate,
    onMissingUsage: onMissing,
  }
}

function amount(raw: unknown, param: string): bigint {
  const parsed = parseDollars(raw)
  if (!parsed.ok) throw new PricingError(`${param} ${parsed.reason}`, param)
  return parsed.atomic
}

function perCall(raw: unknown, param: string, maxPriceAtomic: bigint): bigint {
  const atomic = amount(raw, param)
  if (atomic > maxPriceAtomic)
    throw new PricingError(`${param} must be at most ${toDollars(maxPriceAtomic)}`, param)
  return atomic
}

const dollars = (x: bigint | null) => (x === null ? undefined : toDollars(x))

/** The wire form of a pricing (dollars), as the API shows it. */
export function presentPricing(p: Pricing): Record<string, unknown> {
  if (p.model === 'fixed') return { model: 'fixed', price: toDollars(p.priceAtomic) }
  if (p.model === 'rules') {
    return {
      model: 'rules',
      rules: p.rules.map((r) => ({
        method: r.method,
        path_prefix: r.pathPrefix,
        price: toDollars(r.priceAtomic),
      })),
      default_price: toDollars(p.defaultAtomic),
    }
  }
  const out: Record<string, unknown> = {
    model: 'usage',
    unit: p.unit,
    max_price: toDollars(p.maxAtomic),
    price_per_mb: dollars(p.perMbAtomic),
    price_per_second: dollars(p.perSecondAtomic),
    input_price_per_million: dollars(p.inputPerMillionAtomic),
    output_price_per_million: dollars(p.outputPerMillionAtomic),
    cached_input_price_per_million: dollars(p.cachedInputPerMillionAtomic),
    on_missing_usage: p.onMissingUsage,
  }
  for (const k of Object.keys(out)) if (out[k] === undefined) delete out[k]
  return out
}

/** The response schema of `pricing` (OpenAPI). */
export const PricingObject = v.pipe(
  v.record(v.string(), v.unknown()),
  v.description('The endpoint’s pricing as given (dollars); `{"model":"fixed","price":…}` for a plain price'),
)
