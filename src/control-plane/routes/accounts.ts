// POST /register, GET /account, POST /account/api-keys/roll
import * as v from 'valibot'
import { getAddress, isAddress } from 'viem'
import { type AccountRow, expireOtherKeys, insertAccount, insertApiKey } from '../../db/accounts.ts'
import { apiKeyHint, hashApiKey, newApiKey, newId } from '../../ids.ts'
import { ApiError } from '../api-error.ts'
import type { ControlPlaneDeps } from '../deps.ts'
import type { Route } from '../route.ts'
import { parseBody } from '../validation.ts'
import { cachedAccountBalance } from './payouts.ts'

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

export function presentAccount(a: AccountRow, deps: ControlPlaneDeps) {
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
    async handler({ body, deps }) {
      const input = parseBody(RegisterBody, body)
      const wallet = normaliseWalletAddress(input.wallet_address.trim())
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
    async handler({ account, deps }) {
      return {
        status: 200,
        body: { ...presentAccount(account, deps), balance: await cachedAccountBalance(deps.sql, account.id) },
      }
    },
  },
  {
    method: 'POST',
    path: '/account/api-keys/roll',
    auth: true,
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
