// Smart-wallet payers (ERC-1271 contract wallets, ERC-6492 wrapped signatures): the signature is checked by
// the wallet itself, through an eth_call: an EIP-3009 authorization's (exact) or a Permit2 permit's (upto).
// Only the fallback after ecrecover did not give `from`, so EOA payers (almost all) never pay for an RPC here.
// A wallet not deployed yet (an ERC-6492 wrapper, its factory's call inside) pays an `exact` authorization when
// its factory is one the configuration trusts (x402.eip6492_factories) and the chain holds the
// AuthorizationBatcher, which deploys it at settlement: its signature is checked by ERC-6492's validator run
// without deployment (an eth_call that creates the wallet in the call's state and asks it).
import {
  type Address,
  BaseError,
  type Client,
  ContractFunctionRevertedError,
  ContractFunctionZeroDataError,
  ExecutionRevertedError,
  encodeDeployData,
  erc6492SignatureValidatorAbi,
  erc6492SignatureValidatorByteCode,
  type Hex,
  hashTypedData,
  hexToBool,
  isErc6492Signature,
  parseAbi,
  parseErc6492Signature,
} from 'viem'
import { call, getCode, readContract } from 'viem/actions'
import {
  type AuthorizationTarget,
  authorizationTypedData,
  type TransferAuthorization,
} from './authorization.ts'
import { hasAuthorizationBatcher } from './settle-batch.ts'

export type SmartWalletCheck =
  /**
   * `signature`: what settlement submits: the inner signature of a deployed wallet's ERC-6492 wrapper, the
   * whole wrapper of a wallet to deploy (the AuthorizationBatcher deploys it first: `deploysWallet`).
   */
  | { ok: true; signature: Hex }
  | {
      ok: false
      reason:
        | 'invalid_signature'
        | 'smart_wallet_not_deployed'
        | 'smart_wallet_factory_not_allowed'
        | 'rpc_unavailable'
    }

/** Wallets that may pay before they exist: those of trusted factories, where settlement can deploy them. */
export interface CounterfactualWallets {
  /** The factories trusted (lowercase addresses). */
  factories: ReadonlySet<string>
  /** Whether the chain holds the AuthorizationBatcher (which deploys them); asked only for such a payer. */
  deployable: () => Promise<boolean>
}

/** How long a chain found without the AuthorizationBatcher is believed before it is asked again. */
const BATCHER_RECHECK_MS = 60_000

/** The counterfactual wallets `factories` may create, on this chain; none when the list is empty. */
export function counterfactualWallets(
  client: Client,
  factories: readonly string[],
): CounterfactualWallets | undefined {
  if (factories.length === 0) return undefined
  // Found once, believed; not found, asked again after a while (`npm run deploy:batcher` is picked up). A
  // failed read throws: the payer is told to retry (rpc_unavailable).
  let has: boolean | null = null
  let askedAt = Number.NEGATIVE_INFINITY
  return {
    factories: new Set(factories.map((f) => f.toLowerCase())),
    deployable: async () => {
      if (has === true || (has === false && performance.now() - askedAt < BATCHER_RECHECK_MS)) return has
      has = await hasAuthorizationBatcher(client)
      askedAt = performance.now()
      return has
    },
  }
}

/** The check of one authorization's signature by its payer's wallet, the chain and token bound. */
export type SmartWalletVerifier = (q: {
  authorization: TransferAuthorization
  signature: Hex
}) => Promise<SmartWalletCheck>

/** The verifier of one chain and token, as the data plane's verifier and the facilitator both use it. */
export function smartWalletVerifier(
  client: Client,
  target: AuthorizationTarget,
  counterfactual?: CounterfactualWallets,
): SmartWalletVerifier {
  return (q) => verifySmartWalletAuthorization(client, { ...target, ...q }, counterfactual)
}

const erc1271 = parseAbi(['function isValidSignature(bytes32 hash, bytes signature) view returns (bytes4)'])
/** What isValidSignature answers for a signature the wallet accepts (EIP-1271). */
const MAGIC = '0x1626ba7e'

/** A wallet's own check of any digest it signed (an upto permit's Permit2 digest), as the verifiers ask it. */
export type WalletDigestVerifier = (q: {
  address: Address
  hash: Hex
  signature: Hex
}) => Promise<SmartWalletCheck>

export function walletDigestVerifier(client: Client): WalletDigestVerifier {
  return (q) => askWallet(client, q.address, q.hash, q.signature)
}

/** The authorization's EIP-712 digest, asked of its payer's wallet (askWallet). */
export function verifySmartWalletAuthorization(
  client: Client,
  params: AuthorizationTarget & { authorization: TransferAuthorization; signature: Hex },
  counterfactual?: CounterfactualWallets,
): Promise<SmartWalletCheck> {
  let hash: Hex
  try {
    hash = hashTypedData(authorizationTypedData(params, params.authorization))
  } catch {
    return Promise.resolve({ ok: false, reason: 'invalid_signature' })
  }
  return askWallet(client, params.authorization.from, hash, params.signature, counterfactual)
}

/**
 * The wallet's answer, asked directly (isValidSignature on the digest): an answer other than the magic value,
 * a revert or no code at all is the wallet's no (invalid_signature); a failed call (the node down, a 5xx, a
 * timeout) is rpc_unavailable, a refusal the payer may retry. viem's verifyTypedData would say false for
 * both: a node's outage would have told a good payer its signature is bad.
 */
async function askWallet(
  client: Client,
  from: Address,
  hash: Hex,
  wrapped: Hex,
  counterfactual?: CounterfactualWallets,
): Promise<SmartWalletCheck> {
  let signature = wrapped
  try {
    if (isErc6492Signature(signature)) {
      // A counterfactual wallet has to be deployed through its factory before the token (or Permit2) can ask
      // it: only through a trusted factory, by the batcher (as the reference facilitator, told which to trust).
      const code = await getCode(client, { address: from })
      const unwrapped = parseErc6492Signature(signature)
      if (!code || code === '0x')
        return askUndeployed(client, { from, hash, wrapped, unwrapped, counterfactual })
      signature = unwrapped.signature
    }
    const answer = await readContract(client, {
      address: from,
      abi: erc1271,
      functionName: 'isValidSignature',
      args: [hash, signature],
    })
    return answer.toLowerCase() === MAGIC
      ? { ok: true, signature }
      : { ok: false, reason: 'invalid_signature' }
  } catch (err) {
    const refused =
      err instanceof BaseError &&
      err.walk(
        (e) =>
          e instanceof ContractFunctionRevertedError ||
          e instanceof ContractFunctionZeroDataError ||
          e instanceof ExecutionRevertedError,
      ) !== null
    return { ok: false, reason: refused ? 'invalid_signature' : 'rpc_unavailable' }
  }
}

/**
 * A wallet with no code: refused unless its factory is trusted (none is, unless configured) and settlement
 * can deploy it (smart_wallet_not_deployed: the chain lacks the AuthorizationBatcher); then ERC-6492's
 * validator, run as a deployless eth_call, creates it in the call's state and asks it (true: valid).
 */
async function askUndeployed(
  client: Client,
  q: {
    from: Address
    hash: Hex
    wrapped: Hex
    unwrapped: { address?: Address | undefined }
    counterfactual: CounterfactualWallets | undefined
  },
): Promise<SmartWalletCheck> {
  const factory = q.unwrapped.address?.toLowerCase()
  if (!factory || !q.counterfactual?.factories.has(factory))
    return { ok: false, reason: 'smart_wallet_factory_not_allowed' }
  if (!(await q.counterfactual.deployable())) return { ok: false, reason: 'smart_wallet_not_deployed' }
  const { data } = await call(client, {
    data: encodeDeployData({
      abi: erc6492SignatureValidatorAbi,
      bytecode: erc6492SignatureValidatorByteCode,
      args: [q.from, q.hash, q.wrapped],
    }),
  })
  return data !== undefined && hexToBool(data)
    ? { ok: true, signature: q.wrapped }
    : { ok: false, reason: 'invalid_signature' }
}
