"""Writes the ART model folder of this directory through ART's own `Model.log` (README)."""

import asyncio
import json
import os
import sys

import art

base = sys.argv[1]  # what ART calls the art path


async def main():
    model = art.TrainableModel(
        name="agent-001", project="mail", base_model="Qwen/Qwen3-4B-Instruct-2507", base_path=base
    )
    out = model._get_output_dir()
    os.makedirs(out, exist_ok=True)
    with open(f"{out}/model.json", "w") as f:  # as LocalBackend.register writes it
        json.dump(model.model_dump(), f)
    for step in range(4):
        groups = []
        for g in range(2):
            trajs = []
            for m in range(3):
                trajs.append(
                    art.Trajectory(
                        messages_and_choices=[
                            {"role": "system", "content": "You search an inbox."},
                            {"role": "user", "content": f"Find the mail about topic {g}."},
                            {"role": "assistant", "content": f"It is mail {m}."},
                        ],
                        reward=0.2 + 0.1 * step + 0.05 * m,
                        metrics={"found": m % 2 == 0},
                        metadata={"scenario_id": f"inbox-{g}"},
                    )
                )
            groups.append(art.TrajectoryGroup(trajs))
        await model.log(groups, split="train", step=step)
        if step % 2 == 1:
            val = [
                art.TrajectoryGroup(
                    [
                        art.Trajectory(
                            messages_and_choices=[
                                {"role": "user", "content": "q"},
                                {"role": "assistant", "content": "a"},
                            ],
                            reward=0.5 + 0.05 * step,
                        )
                    ]
                )
            ]
            await model.log(val, split="val", step=step)
            os.makedirs(f"{out}/checkpoints/{step + 1:04d}", exist_ok=True)


asyncio.run(main())
print("ok")
