// An MCP endpoint's prices: per tool name (a price or a pricing model), a default for the tools it does not
// name, tools it marks free, and whether tools it does not know pass free. The wire shape (dollars, valibot,
// errors naming the field), the stored shape (base units as strings) and the compiled one live here.
import * as v from 'valibot'
import { parseDollars, toDollars } from '../money.ts'
import { PricingError, PricingInput, presentPricing, readPricing } from '../pricing/input.ts'
import {
  type Pricing,
  pricingFromStored,
  pricingToStored,
  type StoredPricing,
  type UsagePricing,
} from '../pricing/model.ts'

/** Tool names in the MCP specification: 1–128 characters of A-Z a-z 0-9 _ - . / */
export const TOOL_NAME = /^[A-Za-z0-9_./-]{1,128}$/
export const TOOLS_MAX = 200
/** Prompt names: any text of 1–128 characters without control characters. */
const PROMPT_NAME = /^\P{Cc}{1,128}$/u
const URI_MAX = 2048

const Amount = v.union([v.number(), v.string()], 'must be a number or decimal string')
const ToolPrice = v.union(
  [Amount, PricingInput],
  'must be a price (number or decimal string) or a pricing object (model fixed or usage)',
)

export const McpInput = v.pipe(
  v.strictObject({
    tools: v.optional(
      v.pipe(
        v.record(v.string(), ToolPrice, 'must be an object of tool name → price or pricing'),
        v.check((t) => Object.keys(t).length <= TOOLS_MAX, `must name at most ${TOOLS_MAX} tools`),
      ),
    ),
    resources: v.optional(
      v.pipe(
        v.record(v.string(), ToolPrice, 'must be an object of resource URI → price or pricing'),
        v.check((t) => Object.keys(t).length <= TOOLS_MAX, `must name at most ${TOOLS_MAX} resources`),
      ),
    ),
    prompts: v.optional(
      v.pipe(
        v.record(v.string(), ToolPrice, 'must be an object of prompt name → price or pricing'),
        v.check((t) => Object.keys(t).length <= TOOLS_MAX, `must name at most ${TOOLS_MAX} prompts`),
      ),
    ),
    default_price: Amount,
    free_tools: v.optional(
      v.pipe(
        v.array(v.string('must be strings'), 'must be an array of tool names'),
        v.maxLength(TOOLS_MAX, `must name at most ${TOOLS_MAX} tools`),
      ),
    ),
    unknown_tools_free: v.optional(v.boolean('must be true or false')),
    in_band: v.optional(v.boolean('must be true or false')),
  }),
  v.description(
    'kind "mcp" only. tools: tool name → price or pricing (model fixed or usage) for `tools/call`; ' +
      'default_price: what a `tools/call` of any other tool costs (0 not allowed: use free_tools); ' +
      'free_tools: tools called without payment; unknown_tools_free: a tool named in neither passes ' +
      'free instead of costing default_price. in_band: an unpaid tools/call is answered as the x402 MCP ' +
      'transport says (a tool result with isError and the PaymentRequired) instead of HTTP 402 (a request ' +
      'advertising the org.x402/payment extension gets a payment_required result either way); a payment ' +
      'in params._meta["x402/payment"] is read either way. Protocol methods (initialize, ping, tools/list, ' +
      'notifications/*, …) are always free. resources: resource URI → price or pricing for `resources/read` ' +
      'of that URI; prompts: prompt name → price or pricing for `prompts/get`; resources and prompts not ' +
      'named pass free.',
  ),
)
export type McpInput = v.InferOutput<typeof McpInput>

/** The `mcp` column. */
export interface StoredMcp {
  tools: Record<string, { price_atomic: string } | StoredPricing>
  resources?: Record<string, { price_atomic: string } | StoredPricing>
  prompts?: Record<string, { price_atomic: string } | StoredPricing>
  default_atomic: string
  free_tools: string[]
  unknown_tools_free: boolean
  in_band?: boolean
}

/** An MCP endpoint's prices as the hot path uses them. */
export interface McpPricing {
  tools: Map<string, Pricing>
  /** resources/read by URI and prompts/get by name; what is not named passes free. */
  resources: Map<string, Pricing>
  prompts: Map<string, Pricing>
  defaultAtomic: bigint
  freeTools: Set<string>
  unknownToolsFree: boolean
  /** Unpaid tools/call answered in-band (x402 MCP transport) rather than with HTTP 402. */
  inBand: boolean
}

/** Reads a valid shape into base units; errors name the field (`mcp.tools.search.max_price`). */
export function readMcp(input: McpInput, maxPriceAtomic: bigint): McpPricing {
  const tools = new Map<string, Pricing>()
  const checkName = (name: string, param: string) => {
    if (!TOOL_NAME.test(name))
      throw new PricingError(`${param} must be a tool name (1–128 characters of A-Z a-z 0-9 _ - . /)`, param)
  }
  for (const [name, price] of Object.entries(input.tools ?? {})) {
    const param = `mcp.tools.${name}`
    checkName(name, param)
    tools.set(name, readToolPrice(price, param, maxPriceAtomic))
  }
  const resources = new Map<string, Pricing>()
  for (const [uri, price] of Object.entries(input.resources ?? {})) {
    const param = `mcp.resources.${uri}`
    if (uri.length > URI_MAX || !URL.canParse(uri) || /[\p{Cc}\s]/u.test(uri))
      throw new PricingError(
        `${param} must be a resource URI (an absolute URI of at most ${URI_MAX} characters)`,
        param,
      )
    resources.set(uri, readToolPrice(price, param, maxPriceAtomic))
  }
  const prompts = new Map<string, Pricing>()
  for (const [name, price] of Object.entries(input.prompts ?? {})) {
    const param = `mcp.prompts.${name}`
    if (!PROMPT_NAME.test(name))
      throw new PricingError(
        `${param} must be a prompt name (1–128 characters, no control characters)`,
        param,
      )
    prompts.set(name, readToolPrice(price, param, maxPriceAtomic))
  }
  const freeTools = new Set<string>()
  for (const [i, name] of (input.free_tools ?? []).entries()) {
    checkName(name, `mcp.free_tools[${i}]`)
    if (tools.has(name))
      throw new PricingError(
        `mcp.free_tools[${i}]: ${name} has a price in mcp.tools; a tool is priced or free, not both`,
        `mcp.free_tools[${i}]`,
      )
    freeTools.add(name)
  }
  const defaultAtomic = amount(input.default_price, 'mcp.default_price', maxPriceAtomic)
  // A zero default would let every unlisted tool through unpaid by accident: that is unknown_tools_free.
  if (defaultAtomic === 0n)
    throw new PricingError(
      'mcp.default_price must be above 0 (set unknown_tools_free to let unlisted tools through)',
      'mcp.default_price',
    )
  return {
    tools,
    resources,
    prompts,
    defaultAtomic,
    freeTools,
    unknownToolsFree: input.unknown_tools_free ?? false,
    inBand: input.in_band ?? false,
  }
}

function readToolPrice(raw: unknown, param: string, maxPriceAtomic: bigint): Pricing {
  if (typeof raw === 'number' || typeof raw === 'string') {
    const atomic = amount(raw, param, maxPriceAtomic)
    if (atomic === 0n) throw new PricingError(`${param} must be above 0 (list the tool in free_tools)`, param)
    return { model: 'fixed', priceAtomic: atomic }
  }
  const input = raw as PricingInput
  if (input.model === 'rules')
    throw new PricingError(`${param}.model must be fixed or usage (rules price HTTP paths)`, `${param}.model`)
  try {
    return readPricing(input, undefined, maxPriceAtomic)
  } catch (err) {
    if (err instanceof PricingError)
      throw new PricingError(
        err.message.replace(/^pricing\./, `${param}.`),
        err.param.replace(/^pricing/, param),
      )
    throw err
  }
}

function amount(raw: unknown, param: string, maxPriceAtomic: bigint): bigint {
  const parsed = parseDollars(raw)
  if (!parsed.ok) throw new PricingError(`${param} ${parsed.reason}`, param)
  if (parsed.atomic > maxPriceAtomic)
    throw new PricingError(`${param} must be at most ${toDollars(maxPriceAtomic)}`, param)
  return parsed.atomic
}

function pricesToStored(prices: Map<string, Pricing>): StoredMcp['tools'] {
  const out: StoredMcp['tools'] = {}
  for (const [name, p] of prices)
    out[name] = p.model === 'fixed' ? { price_atomic: p.priceAtomic.toString() } : pricingToStored(p)!
  return out
}

function pricesFromStored(stored: StoredMcp['tools'] | undefined): Map<string, Pricing> {
  const out = new Map<string, Pricing>()
  for (const [name, p] of Object.entries(stored ?? {}))
    out.set(
      name,
      'price_atomic' in p
        ? { model: 'fixed', priceAtomic: BigInt(p.price_atomic) }
        : pricingFromStored(p, 0n),
    )
  return out
}

function presentPrices(prices: Map<string, Pricing>): Record<string, unknown> {
  const out: Record<string, unknown> = {}
  for (const [name, p] of prices)
    out[name] = p.model === 'fixed' ? toDollars(p.priceAtomic) : presentPricing(p)
  return out
}

export function mcpToStored(m: McpPricing): StoredMcp {
  return {
    tools: pricesToStored(m.tools),
    // Written only when set: a row without them reads as before.
    ...(m.resources.size > 0 ? { resources: pricesToStored(m.resources) } : {}),
    ...(m.prompts.size > 0 ? { prompts: pricesToStored(m.prompts) } : {}),
    default_atomic: m.defaultAtomic.toString(),
    free_tools: [...m.freeTools],
    unknown_tools_free: m.unknownToolsFree,
    in_band: m.inBand,
  }
}

export function mcpFromStored(s: StoredMcp): McpPricing {
  return {
    tools: pricesFromStored(s.tools),
    resources: pricesFromStored(s.resources),
    prompts: pricesFromStored(s.prompts),
    defaultAtomic: BigInt(s.default_atomic),
    freeTools: new Set(s.free_tools),
    unknownToolsFree: s.unknown_tools_free,
    inBand: s.in_band ?? false,
  }
}

/** The wire form (dollars), as the API shows it. */
export function presentMcp(m: McpPricing): Record<string, unknown> {
  return {
    tools: presentPrices(m.tools),
    resources: presentPrices(m.resources),
    prompts: presentPrices(m.prompts),
    default_price: toDollars(m.defaultAtomic),
    free_tools: [...m.freeTools],
    unknown_tools_free: m.unknownToolsFree,
    in_band: m.inBand,
  }
}

/** The response schema of `mcp` (OpenAPI). */
export const McpObject = v.pipe(
  v.nullable(v.record(v.string(), v.unknown())),
  v.description('kind "mcp": the per-tool prices as given (dollars); null for kind "http"'),
)

/** A tool's usage pricing, when it is measured on its answer. */
export function usageOf(p: Pricing): UsagePricing | null {
  return p.model === 'usage' ? p : null
}
