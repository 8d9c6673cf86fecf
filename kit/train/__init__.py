"""Post-training of the agent: GRPO with checker rewards (kit/train/grpo.py).

    from kit.train.grpo import GRPOConfig, GRPOTrainer
    from kit.train.grpo_math import group_advantages, filter_groups, ppo_clip_loss

Modules: grpo_math (pure arithmetic: advantages, filtering, masks, loss), sequences (trajectories
-> training rows with the exact sampled token ids; log-probabilities), grpo (config + loop).
Importing kit.train imports nothing heavy; import the modules you need.
"""
