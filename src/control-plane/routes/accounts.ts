// POST /register, GET /account, POST /account/api-keys/roll
import * as v from 'valibot'
import { getAddress, isAddress, zeroAddress } from 'viem'
import { type AccountRow, expireOtherKeys, insertAccount, insertApiKey } from '../../db/accounts.ts'
import { ApiError } from '../../errors.ts'
import { apiKeyHint, hashApiKey, newApiKey, newId } from '../../ids.ts'
import { Address, Network, Timestamp } from '../api-schemas.ts'
import type { ControlPlaneDeps } from '../deps.ts'
import type { Route } from '../route.ts'
import { parseBody } from '../validation.ts'
import { BalanceObject, currentAccountBalance } from './payouts.ts'

const RegisterBody = v.strictObject({
  wallet_address: v.string('must be a string'),
  business_name: v.pipe(
    v.string('must be a string'),
    v.trim(),
    v.minLength(1, 'must not be empty'),
    v.maxLength(200, 'must be at most 200 characters'),
  ),
})

const RollBody = v.optional(
  v.strictObject({
    grace_period_ms: v.optional(
      v.pipe(
        v.number('must be a number of milliseconds'),
        v.integer('must be an integer'),
        v.minValue(0, 'must be ≥ 0'),
        v.maxValue(7 * 24 * 3600 * 1000, 'must be at most 7 days'),
      ),
    ),
  }),
)

export const AccountObject = v.strictObject({
  id: v.string(),
  object: v.literal('account'),
  wallet_address: Address,
  business_name: v.string(),
  network: Network,
  chain_id: v.number(),
  livemode: v.boolean(),
  created_at: Timestamp,
})
const RegisterResponse = v.strictObject({
  account: AccountObject,
  api_key: v.pipe(v.string(), v.description('shown this once; only its hash is stored')),
})
const AccountWithBalance = v.strictObject({
  ...AccountObject.entries,
  balance: v.strictObject({ ...BalanceObject.entries, as_of: Timestamp }),
})
const RolledKey = v.strictObject({
  object: v.literal('api_key'),
  id: v.string(),
  api_key: v.string(),
  previous_keys_expire_at: Timestamp,
})

export function presentAccount(a: AccountRow, deps: ControlPlaneDeps): v.InferOutput<typeof AccountObject> {
  return {
    id: a.id,
    object: 'account',
    wallet_address: a.wallet_address,
    business_name: a.business_name,
    network: deps.chain.network,
    chain_id: deps.chain.chainId,
    livemode: a.mode === 'live',
    created_at: a.created_at.toISOString(),
  }
}

/** A mixed-case address must pass its EIP-55 checksum; all-lower or all-upper is accepted as is. */
export function normaliseWalletAddress(raw: string): `0x${string}` | null {
  if (!isAddress(raw, { strict: true })) return null
  return getAddress(raw)
}

export const accountRoutes: Route[] = [
  {
    method: 'POST',
    path: '/register',
    auth: false,
    doc: {
      summary: 'Open an account (no credential); the answer holds the API key, shown once',
      body: RegisterBody,
      response: { status: 201, schema: RegisterResponse },
    },
    async handler({ body, deps }) {
      const input = parseBody(RegisterBody, body)
      const wallet = normaliseWalletAddress(input.wallet_address.trim())
      // Payouts to the zero address are burned: a typo or a placeholder, never a wallet someone holds.
      if (wallet === zeroAddress) {
        throw new ApiError(
          'invalid_wallet_address',
          'wallet_address must not be the zero address (0x000…000): payouts sent there are lost',
          'wallet_address',
        )
      }
      if (!wallet) {
        throw new ApiError(
          'invalid_wallet_address',
          'wallet_address must be a 0x-prefixed 20-byte address; a mixed-case address must match its EIP-55 checksum',
          'wallet_address',
        )
      }
      const mode = deps.chain.network === 'base' ? 'live' : 'test'
      const apiKey = newApiKey(mode)
      const account = await deps.sql.begin(async (tx) => {
        const row = await insertAccount(tx, {
          id: newId('acct'),
          walletAddress: wallet,
          businessName: input.business_name,
          mode,
        })
        await insertApiKey(tx, {
          id: newId('key'),
          accountId: row.id,
          keyHash: hashApiKey(apiKey),
          hint: apiKeyHint(apiKey),
        })
        return row
      })
      // The key is shown this once; only its hash is stored.
      return { status: 201, body: { account: presentAccount(account as AccountRow, deps), api_key: apiKey } }
    },
  },
  {
    method: 'GET',
    path: '/account',
    auth: true,
    doc: {
      summary: "The caller's account with its balance",
      response: { status: 200, schema: AccountWithBalance },
    },
    async handler({ account, deps }) {
      return {
        status: 200,
        body: {
          ...presentAccount(account, deps),
          balance: await currentAccountBalance(deps.sql, account.id),
        },
      }
    },
  },
  {
    method: 'POST',
    path: '/account/api-keys/roll',
    auth: true,
    doc: {
      summary: 'A new API key; the old ones stop now or after grace_period_ms',
      body: RollBody,
      bodyOptional: true,
      response: { status: 201, schema: RolledKey },
    },
    async handler({ account, body, deps }) {
      const input = parseBody(RollBody, body ?? {})
      const graceMs = input?.grace_period_ms ?? 0
      const apiKey = newApiKey(account.mode)
      const keyId = newId('key')
      const expiresAt = await deps.sql.begin(async (tx) => {
        await insertApiKey(tx, {
          id: keyId,
          accountId: account.id,
          keyHash: hashApiKey(apiKey),
          hint: apiKeyHint(apiKey),
        })
        return expireOtherKeys(tx, account.id, keyId, graceMs)
      })
      // Here at once; other processes' entries end within the cache's TTL (key-cache.ts).
      deps.keys.forgetAccount(account.id)
      return {
        status: 201,
        body: {
          object: 'api_key',
          id: keyId,
          api_key: apiKey,
          previous_keys_expire_at: (expiresAt as Date).toISOString(),
        },
      }
    },
  },
]
