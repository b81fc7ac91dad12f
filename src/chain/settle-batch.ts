// Settling many x402 authorizations in one transaction through the project's AuthorizationBatcher: one
// signature, one broadcast and one receipt per batch. The contract sits at its CREATE2 address through the
// deterministic deployer, the same on every chain, so the service finds it by its code (no configured
// address); without it, settlement falls back to one transaction per authorization (./settle.ts).
import {
  type Account,
  type Address,
  type Chain,
  type Client,
  type Hash,
  type Hex,
  isErc6492Signature,
  type PrivateKeyAccount,
  type TransactionReceipt,
  type Transport,
  toEventSelector,
  type WalletClient,
} from 'viem'
import { getCode } from 'viem/actions'
import { authorizationBatcherArtifact } from './contracts/artifacts.ts'
import { type Create2Deployment, create2Address, deployCreate2 } from './create2.ts'
import { dataWords, eventTopic, topicAddress, topicWord } from './log-words.ts'
import type { FeeQuote } from './payouts.ts'
import { SETTLEMENT_GAS, type StoredAuthorization, signSettlement } from './settle.ts'
import { settleCalldata } from './settle-batch-encoding.ts'
import { signCall } from './sign-call.ts'
import { AUTHORIZATION_USED_TOPIC } from './transfer.ts'

export const AUTHORIZATION_BATCHER_ADDRESS: Address = create2Address(authorizationBatcherArtifact.bytecode)

/**
 * Gas limit of a batch: the contract attempts an item only with ITEM_GAS (200k) left, and one
 * transferWithAuthorization uses ~40–70k (a smart wallet's more), so 120k per item plus 250k lets every item
 * be attempted; an item of a wallet to deploy first (ERC-6492) needs DEPLOY_GAS (500k) more left, and is
 * given that. Only the gas used is paid; an item left unattempted is signed again in a later batch.
 */
export function batchSettlementGas(items: number, toDeploy = 0): bigint {
  const wanted = 250_000n + 120_000n * BigInt(items) + 500_000n * BigInt(toDeploy)
  return wanted < MAX_TRANSACTION_GAS ? wanted : MAX_TRANSACTION_GAS
}

/**
 * EIP-7825's cap on one transaction's gas (2^24): settlement.per_transaction (at most 100) keeps a batch of
 * EOA authorizations under it; wallets to deploy could take it over, so the limit stops there and the batcher
 * leaves the items it has no gas for unattempted, for a later batch.
 */
export const MAX_TRANSACTION_GAS = 16_777_216n

/**
 * An ERC-6492 wrapper: the signature of a smart wallet that may not be deployed yet. Stored as signed (the
 * verifier let it through only for a factory it trusts) and settled only through the AuthorizationBatcher,
 * which deploys the wallet first when it has no code.
 */
export function deploysWallet(a: Pick<StoredAuthorization, 'signature'>): boolean {
  return a.signature.length > 66 && isErc6492Signature(a.signature)
}

/**
 * One settlement transaction of `exact` authorizations, from any sender: one authorization is
 * transferWithAuthorization itself (unless its wallet is to be deployed), several one call of the
 * AuthorizationBatcher.
 */
export function signAuthorizations(
  account: PrivateKeyAccount,
  p: { chainId: number; usdc: Address; authorizations: StoredAuthorization[]; nonce: number; fees: FeeQuote },
): Promise<{ rawTx: Hex; hash: Hash }> {
  const { authorizations, ...common } = p
  if (authorizations.length === 1 && !deploysWallet(authorizations[0]!))
    return signSettlement(account, { ...common, authorization: authorizations[0]!, gas: SETTLEMENT_GAS })
  return signSettlementBatch(account, p)
}

/** True when the chain holds this build's AuthorizationBatcher at its address (one eth_getCode). */
export async function hasAuthorizationBatcher(client: Client): Promise<boolean> {
  const code = await getCode(client, { address: AUTHORIZATION_BATCHER_ADDRESS })
  return code?.toLowerCase() === authorizationBatcherArtifact.deployedBytecode.toLowerCase()
}

export async function signSettlementBatch(
  account: PrivateKeyAccount,
  p: {
    chainId: number
    usdc: Address
    authorizations: StoredAuthorization[]
    nonce: number
    fees: FeeQuote
  },
): Promise<{ rawTx: Hex; hash: Hash }> {
  return signCall(account, {
    ...p,
    to: AUTHORIZATION_BATCHER_ADDRESS,
    data: settleCalldata(p.usdc, p.authorizations),
    gas: batchSettlementGas(p.authorizations.length, p.authorizations.filter(deploysWallet).length),
  })
}

const BATCH_SETTLED = toEventSelector('BatchSettled(address,uint256,uint256)')

/**
 * What a mined settlement transaction did to each of its authorizations, in order:
 * - `used`: the token logged AuthorizationUsed for it in this transaction (the money arrived);
 * - `failed`: attempted and reverted (the caller asks the chain whether it is used anyway);
 * - `unattempted`: a batch that ran short of gas, or reverted as a whole: nothing happened to it.
 * A single transferWithAuthorization (no BatchSettled log) attempted its one authorization.
 * The logs are read by hand (./log-words.ts): a batch of 50 carries 100 of them.
 */
export function settlementOutcomes(
  receipt: Pick<TransactionReceipt, 'status' | 'logs' | 'to'>,
  q: { usdc: Address; authorizations: Array<Pick<StoredAuthorization, 'from' | 'nonce'>> },
): Array<'used' | 'failed' | 'unattempted'> {
  const batch = receipt.to?.toLowerCase() === AUTHORIZATION_BATCHER_ADDRESS.toLowerCase()
  if (receipt.status !== 'success') return q.authorizations.map(() => (batch ? 'unattempted' : 'failed'))
  const usdc = q.usdc.toLowerCase()
  const batcher = AUTHORIZATION_BATCHER_ADDRESS.toLowerCase()
  const used = new Set<string>()
  let attempted = batch ? 0 : q.authorizations.length
  for (const log of receipt.logs) {
    const topic = eventTopic(log.topics)
    const from = log.address.toLowerCase()
    if (topic === AUTHORIZATION_USED_TOPIC && from === usdc) {
      const authorizer = topicAddress(log.topics[1])
      const nonce = log.topics[2]
      if (log.topics.length !== 3 || authorizer === null || topicWord(nonce) === null || log.data !== '0x')
        continue
      used.add(`${authorizer}:${nonce!.toLowerCase()}`)
    } else if (topic === BATCH_SETTLED && batch && from === batcher) {
      const words = dataWords(log.data, 2)
      if (log.topics.length !== 2 || topicAddress(log.topics[1]) === null || words === null) continue
      attempted = Number(words[0])
    }
  }
  return q.authorizations.map((a, i) => {
    if (used.has(`${a.from.toLowerCase()}:${a.nonce.toLowerCase()}`)) return 'used'
    return i < attempted ? 'failed' : 'unattempted'
  })
}

/**
 * Deploys this build's AuthorizationBatcher at its CREATE2 address from `wallet` (any funded account; the
 * contract has no owner), unless it is there already. Needs the deterministic deployment proxy on the chain.
 */
export function deployAuthorizationBatcher(
  publicClient: Client,
  wallet: WalletClient<Transport, Chain | undefined, Account>,
): Promise<Create2Deployment> {
  return deployCreate2(publicClient, wallet, {
    initCode: authorizationBatcherArtifact.bytecode,
    present: () => hasAuthorizationBatcher(publicClient),
  })
}
