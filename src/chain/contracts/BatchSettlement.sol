// SPDX-License-Identifier: MIT
// tollgate's own implementation of the x402 `batch-settlement` channel contract, written from the ABI,
// EIP-712 types and scheme description published in @x402/evm 2.27 (src/batch-settlement: abi.ts,
// constants.ts, facilitator/*). For the local dev chain and tests: installed with anvil_setCode at the
// address the published client expects (0x4020074e9dF2ce1deE5A9C1b5c3f541D02a10003). On a real network
// the contracts deployed by the x402 project are used instead.
//
// The model: a channel is identified by the EIP-712 hash of its immutable ChannelConfig. The payer
// deposits into it through a deposit collector (which pulls the tokens, e.g. by ERC-3009), then signs
// cumulative Vouchers (channelId, maxClaimableAmount). The receiver's authorizer claims any number of
// channels in one transaction (claim / claimWithSignature), which moves the claimed amounts to the
// receiver's per-token total; settle() then transfers what is claimed but not yet settled. Unclaimed
// balance goes back to the payer by a cooperative refund (receiver authorizer) or by a delayed
// withdrawal (payer: initiateWithdraw, then finalizeWithdraw after the channel's withdrawDelay).
pragma solidity ^0.8.24;

interface IERC20Minimal {
  function balanceOf(address account) external view returns (uint256);
  function transfer(address to, uint256 value) external returns (bool);
}

interface IERC1271Wallet {
  function isValidSignature(bytes32 hash, bytes memory signature) external view returns (bytes4);
}

/// What the channel contract asks of a collector: move `amount` of `token` from `payer` to the caller.
interface IDepositCollector {
  function collect(address payer, address token, uint256 amount, bytes32 channelId, bytes calldata data) external;
}

contract BatchSettlement {
  struct ChannelConfig {
    address payer;
    address payerAuthorizer;
    address receiver;
    address receiverAuthorizer;
    address token;
    uint40 withdrawDelay;
    bytes32 salt;
  }

  struct Voucher {
    ChannelConfig channel;
    uint128 maxClaimableAmount;
  }

  struct VoucherClaim {
    Voucher voucher;
    bytes signature;
    uint128 totalClaimed;
  }

  struct Channel {
    uint128 balance;
    uint128 totalClaimed;
  }

  struct PendingWithdrawal {
    uint128 amount;
    uint40 initiatedAt;
  }

  struct ReceiverTotals {
    uint128 totalClaimed;
    uint128 totalSettled;
  }

  uint40 public constant MIN_WITHDRAW_DELAY = 900;
  uint40 public constant MAX_WITHDRAW_DELAY = 2592000;

  bytes32 private constant EIP712_DOMAIN_TYPEHASH =
    keccak256('EIP712Domain(string name,string version,uint256 chainId,address verifyingContract)');
  bytes32 public constant CHANNEL_CONFIG_TYPEHASH =
    keccak256(
      'ChannelConfig(address payer,address payerAuthorizer,address receiver,address receiverAuthorizer,address token,uint40 withdrawDelay,bytes32 salt)'
    );
  bytes32 private constant VOUCHER_TYPEHASH = keccak256('Voucher(bytes32 channelId,uint128 maxClaimableAmount)');
  bytes32 private constant REFUND_TYPEHASH = keccak256('Refund(bytes32 channelId,uint256 nonce,uint128 amount)');
  bytes32 private constant CLAIM_ENTRY_TYPEHASH =
    keccak256('ClaimEntry(bytes32 channelId,uint128 maxClaimableAmount,uint128 totalClaimed)');
  // EIP-712: a struct's type string is followed by the types it references, sorted by name.
  bytes32 private constant CLAIM_BATCH_TYPEHASH =
    keccak256(
      'ClaimBatch(ClaimEntry[] claims)ClaimEntry(bytes32 channelId,uint128 maxClaimableAmount,uint128 totalClaimed)'
    );
  uint256 private constant SECP256K1_HALF_N = 0x7FFFFFFFFFFFFFFFFFFFFFFFFFFFFFFF5D576E7357A4501DDFE92F46681B20A0;

  mapping(bytes32 => Channel) public channels;
  mapping(bytes32 => PendingWithdrawal) public pendingWithdrawals;
  mapping(address => mapping(address => ReceiverTotals)) public receivers;
  mapping(bytes32 => uint256) public refundNonce;

  event Deposited(bytes32 indexed channelId, address indexed payer, address collector, uint128 amount);
  event Claimed(bytes32 indexed channelId, address indexed receiver, uint128 totalClaimed, uint128 delta);
  event Settled(address indexed receiver, address indexed token, address indexed sender, uint128 amount);
  event WithdrawInitiated(bytes32 indexed channelId, uint128 amount, uint40 initiatedAt);
  event Withdrawn(bytes32 indexed channelId, address indexed payer, uint128 amount);
  event Refunded(bytes32 indexed channelId, address indexed payer, uint128 amount, uint256 nonce);

  // ---- EIP-712 ----

  // Computed per call (no immutables): the contract is installed with anvil_setCode, so no constructor
  // runs, and a chain-id change must not keep an old separator.
  function _domainSeparator() private view returns (bytes32) {
    return
      keccak256(
        abi.encode(
          EIP712_DOMAIN_TYPEHASH,
          keccak256(bytes('x402 Batch Settlement')),
          keccak256(bytes('1')),
          block.chainid,
          address(this)
        )
      );
  }

  function _typedDataHash(bytes32 structHash) private view returns (bytes32) {
    return keccak256(abi.encodePacked('\x19\x01', _domainSeparator(), structHash));
  }

  function getChannelId(ChannelConfig calldata config) public view returns (bytes32) {
    return
      _typedDataHash(
        keccak256(
          abi.encode(
            CHANNEL_CONFIG_TYPEHASH,
            config.payer,
            config.payerAuthorizer,
            config.receiver,
            config.receiverAuthorizer,
            config.token,
            config.withdrawDelay,
            config.salt
          )
        )
      );
  }

  function getVoucherDigest(bytes32 channelId, uint128 maxClaimableAmount) public view returns (bytes32) {
    return _typedDataHash(keccak256(abi.encode(VOUCHER_TYPEHASH, channelId, maxClaimableAmount)));
  }

  function getRefundDigest(bytes32 channelId, uint256 nonce, uint128 amount) public view returns (bytes32) {
    return _typedDataHash(keccak256(abi.encode(REFUND_TYPEHASH, channelId, nonce, amount)));
  }

  function getClaimBatchDigest(VoucherClaim[] calldata voucherClaims) public view returns (bytes32) {
    bytes32[] memory entries = new bytes32[](voucherClaims.length);
    for (uint256 i = 0; i < voucherClaims.length; i++) {
      entries[i] = keccak256(
        abi.encode(
          CLAIM_ENTRY_TYPEHASH,
          getChannelId(voucherClaims[i].voucher.channel),
          voucherClaims[i].voucher.maxClaimableAmount,
          voucherClaims[i].totalClaimed
        )
      );
    }
    return _typedDataHash(keccak256(abi.encode(CLAIM_BATCH_TYPEHASH, keccak256(abi.encodePacked(entries)))));
  }

  // ---- deposits ----

  /// Anyone may submit a deposit: the collector proves the payer's consent (its signed authorization), and
  /// the tokens must actually arrive here, so no collector can credit a channel with tokens it did not move.
  function deposit(ChannelConfig calldata config, uint128 amount, address collector, bytes calldata collectorData)
    external
  {
    require(amount > 0, 'BatchSettlement: zero deposit');
    require(
      config.withdrawDelay >= MIN_WITHDRAW_DELAY && config.withdrawDelay <= MAX_WITHDRAW_DELAY,
      'BatchSettlement: withdraw delay out of range'
    );
    require(config.receiverAuthorizer != address(0), 'BatchSettlement: no receiver authorizer');
    bytes32 channelId = getChannelId(config);
    IERC20Minimal token = IERC20Minimal(config.token);
    uint256 before = token.balanceOf(address(this));
    IDepositCollector(collector).collect(config.payer, config.token, amount, channelId, collectorData);
    require(token.balanceOf(address(this)) >= before + amount, 'BatchSettlement: deposit not received');
    channels[channelId].balance += amount;
    emit Deposited(channelId, config.payer, collector, amount);
  }

  // ---- claims and settlement ----

  /// The receiver authorizer (or the receiver) claims vouchers directly, many channels in one call.
  function claim(VoucherClaim[] calldata voucherClaims) external {
    for (uint256 i = 0; i < voucherClaims.length; i++) {
      ChannelConfig calldata c = voucherClaims[i].voucher.channel;
      require(msg.sender == c.receiverAuthorizer || msg.sender == c.receiver, 'BatchSettlement: not receiver');
      _claim(voucherClaims[i]);
    }
  }

  /// Anyone may submit claims the receiver authorizer signed (EIP-712 ClaimBatch).
  function claimWithSignature(VoucherClaim[] calldata voucherClaims, bytes calldata authorizerSignature) external {
    bytes32 digest = getClaimBatchDigest(voucherClaims);
    for (uint256 i = 0; i < voucherClaims.length; i++) {
      require(
        _isValidSignature(voucherClaims[i].voucher.channel.receiverAuthorizer, digest, authorizerSignature),
        'BatchSettlement: invalid authorizer signature'
      );
      _claim(voucherClaims[i]);
    }
  }

  // A claim at or below what is already claimed changes nothing: a batch resubmitted after a lost receipt
  // (or racing a refund that claimed first) is idempotent instead of reverting every other channel in it.
  function _claim(VoucherClaim calldata vc) private {
    ChannelConfig calldata c = vc.voucher.channel;
    bytes32 channelId = getChannelId(c);
    Channel storage ch = channels[channelId];
    require(vc.totalClaimed <= vc.voucher.maxClaimableAmount, 'BatchSettlement: claim above voucher');
    require(vc.totalClaimed <= ch.balance, 'BatchSettlement: claim above balance');
    if (vc.totalClaimed <= ch.totalClaimed) return;
    address signer = c.payerAuthorizer != address(0) ? c.payerAuthorizer : c.payer;
    require(
      _isValidSignature(signer, getVoucherDigest(channelId, vc.voucher.maxClaimableAmount), vc.signature),
      'BatchSettlement: invalid voucher signature'
    );
    uint128 delta = vc.totalClaimed - ch.totalClaimed;
    ch.totalClaimed = vc.totalClaimed;
    receivers[c.receiver][c.token].totalClaimed += delta;
    emit Claimed(channelId, c.receiver, vc.totalClaimed, delta);
  }

  /// Transfers to the receiver everything claimed for it in `token` and not yet settled. Anyone may call it:
  /// the tokens can only go to the receiver.
  function settle(address receiver, address token) external {
    ReceiverTotals storage r = receivers[receiver][token];
    uint128 amount = r.totalClaimed - r.totalSettled;
    r.totalSettled = r.totalClaimed;
    if (amount > 0) require(IERC20Minimal(token).transfer(receiver, amount), 'BatchSettlement: transfer failed');
    emit Settled(receiver, token, msg.sender, amount);
  }

  // ---- the payer's way out: delayed withdrawal ----

  function initiateWithdraw(ChannelConfig calldata config, uint128 amount) external {
    require(msg.sender == config.payer || msg.sender == config.payerAuthorizer, 'BatchSettlement: not payer');
    require(amount > 0, 'BatchSettlement: zero withdrawal');
    bytes32 channelId = getChannelId(config);
    pendingWithdrawals[channelId] = PendingWithdrawal(amount, uint40(block.timestamp));
    emit WithdrawInitiated(channelId, amount, uint40(block.timestamp));
  }

  /// After the delay, the payer gets at most what no voucher claimed: the receiver had the delay to claim.
  function finalizeWithdraw(ChannelConfig calldata config) external {
    bytes32 channelId = getChannelId(config);
    PendingWithdrawal memory w = pendingWithdrawals[channelId];
    require(w.initiatedAt != 0, 'BatchSettlement: no withdrawal');
    require(block.timestamp >= uint256(w.initiatedAt) + config.withdrawDelay, 'BatchSettlement: withdraw delay');
    delete pendingWithdrawals[channelId];
    Channel storage ch = channels[channelId];
    uint128 available = ch.balance - ch.totalClaimed;
    uint128 amount = w.amount < available ? w.amount : available;
    ch.balance -= amount;
    if (amount > 0) require(IERC20Minimal(config.token).transfer(config.payer, amount), 'BatchSettlement: transfer failed');
    emit Withdrawn(channelId, config.payer, amount);
  }

  // ---- cooperative refund (receiver side) ----

  function refund(ChannelConfig calldata config, uint128 amount) external {
    require(
      msg.sender == config.receiverAuthorizer || msg.sender == config.receiver,
      'BatchSettlement: not receiver'
    );
    _refund(config, getChannelId(config), amount);
  }

  function refundWithSignature(
    ChannelConfig calldata config,
    uint128 amount,
    uint256 nonce,
    bytes calldata receiverAuthorizerSignature
  ) external {
    bytes32 channelId = getChannelId(config);
    require(nonce == refundNonce[channelId], 'BatchSettlement: stale refund nonce');
    require(
      _isValidSignature(config.receiverAuthorizer, getRefundDigest(channelId, nonce, amount), receiverAuthorizerSignature),
      'BatchSettlement: invalid refund signature'
    );
    _refund(config, channelId, amount);
  }

  // Refunds at most the unclaimed balance; a pending withdrawal is void once the payer got its refund.
  function _refund(ChannelConfig calldata config, bytes32 channelId, uint128 amount) private {
    Channel storage ch = channels[channelId];
    uint128 available = ch.balance - ch.totalClaimed;
    uint128 paid = amount < available ? amount : available;
    require(paid > 0, 'BatchSettlement: nothing to refund');
    ch.balance -= paid;
    uint256 nonce = refundNonce[channelId]++;
    delete pendingWithdrawals[channelId];
    require(IERC20Minimal(config.token).transfer(config.payer, paid), 'BatchSettlement: transfer failed');
    emit Refunded(channelId, config.payer, paid, nonce);
  }

  // ---- batching ----

  /// Several calls in one transaction (e.g. claim then refund), with the caller's msg.sender.
  function multicall(bytes[] calldata data) external returns (bytes[] memory results) {
    results = new bytes[](data.length);
    for (uint256 i = 0; i < data.length; i++) {
      (bool ok, bytes memory result) = address(this).delegatecall(data[i]);
      if (!ok) {
        assembly {
          revert(add(result, 0x20), mload(result))
        }
      }
      results[i] = result;
    }
  }

  // An EOA signs with ECDSA (low s only, so a signature has one form); a contract wallet answers ERC-1271.
  function _isValidSignature(address signer, bytes32 digest, bytes memory signature) private view returns (bool) {
    if (signer.code.length > 0) {
      (bool ok, bytes memory result) = signer.staticcall(
        abi.encodeWithSelector(IERC1271Wallet.isValidSignature.selector, digest, signature)
      );
      return ok && result.length >= 32 && abi.decode(result, (bytes4)) == IERC1271Wallet.isValidSignature.selector;
    }
    if (signature.length != 65) return false;
    bytes32 r;
    bytes32 s;
    uint8 v;
    assembly {
      r := mload(add(signature, 0x20))
      s := mload(add(signature, 0x40))
      v := byte(0, mload(add(signature, 0x60)))
    }
    if (uint256(s) > SECP256K1_HALF_N) return false;
    if (v != 27 && v != 28) return false;
    address recovered = ecrecover(digest, v, r, s);
    return recovered != address(0) && recovered == signer;
  }
}
