"""Trigger tests: Lightning's (PyTorch Lightning and Fabric) messages about its hooks: the LightningModule methods
it calls at fixed points, and the tensor hook Fabric puts on outputs. One CPU step, no logger, no checkpoint."""
from __future__ import annotations

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from message_triggers import trigger, triggers_of


def _data(n: int = 4) -> DataLoader:
    torch.manual_seed(0)
    return DataLoader(TensorDataset(torch.randn(n, 4), torch.randn(n, 1)), batch_size=2)


def _module_class():
    import pytorch_lightning as pl

    class Tiny(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = nn.Linear(4, 1)

        def training_step(self, batch, batch_idx):
            x, y = batch
            return nn.functional.mse_loss(self.layer(x), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)
    return Tiny


def _trainer(**options):
    import pytorch_lightning as pl
    return pl.Trainer(accelerator="cpu", devices=1, max_steps=1, logger=False, enable_checkpointing=False,
                      enable_progress_bar=False, enable_model_summary=False, **options)


def _fit(model, **options):
    _trainer(**options).fit(model, train_dataloaders=_data())


# --- hooks a LightningModule must define, or may no longer ---------------------------------------------------

@trigger("train-dataloader-must-be-implemented-to-be-used-with-0102de")
def lightning_train_dataloader_not_defined():
    _module_class()().train_dataloader()


@trigger("val-dataloader-must-be-implemented-to-be-used-with-455c76")
def lightning_val_dataloader_not_defined():
    _module_class()().val_dataloader()


@trigger("test-dataloader-must-be-implemented-to-be-used-with-eb551a")
def lightning_test_dataloader_not_defined():
    _module_class()().test_dataloader()


@trigger("predict-dataloader-must-be-implemented-to-be-used-with-cbe4a4")
def lightning_predict_dataloader_not_defined():
    _module_class()().predict_dataloader()


@trigger("support-for-training-epoch-end-has-been-removed-in-fb3654")
def lightning_training_epoch_end_defined():
    class Old(_module_class()):
        def training_epoch_end(self, outputs):
            pass
    _fit(Old())


@trigger("support-for-validation-epoch-end-has-been-removed-in-babbd2")
def lightning_validation_epoch_end_defined():
    class Old(_module_class()):
        def validation_step(self, batch, batch_idx):
            pass

        def validation_epoch_end(self, outputs):
            pass
    _trainer().fit(Old(), train_dataloaders=_data(), val_dataloaders=_data())


@trigger("support-for-has-been-removed-in-v2-0-0-6c664a")
def lightning_test_epoch_end_defined():
    class Old(_module_class()):
        def test_step(self, batch, batch_idx):
            pass

        def test_epoch_end(self, outputs):
            pass
    _trainer().test(Old(), dataloaders=_data())


# --- hooks called by the trainer ----------------------------------------------------------------------------

@trigger("no-lightningmodule-is-available-to-call-hooks-on-e02c20")
def lightning_module_hook_called_without_a_module():
    from pytorch_lightning.trainer import call
    call._call_lightning_module_hook(_trainer(), "on_train_start")


@trigger("no-lightningdatamodule-is-available-to-call-hooks-on-625e85")
def lightning_datamodule_hook_called_without_a_datamodule():
    from pytorch_lightning.trainer import call
    call._call_lightning_datamodule_hook(_trainer(), "setup")


@trigger("is-not-a-shared-hook-within-lightningmodule-and-lightnin-d4c4e9")
def lightning_data_hook_selector_asked_for_another_hook():
    from pytorch_lightning.trainer.connectors.data_connector import _DataHookSelector
    _DataHookSelector(_module_class()(), None).get_instance("training_step")


@trigger("you-have-overridden-in-both-lightningmodule-and-lightnin-8ce8c2")
def lightning_batch_transfer_hook_in_module_and_datamodule():
    import pytorch_lightning as pl
    from pytorch_lightning.trainer.connectors.data_connector import _DataHookSelector

    class Module(_module_class()):
        def on_before_batch_transfer(self, batch, dataloader_idx):
            return batch

    class Data(pl.LightningDataModule):
        def on_before_batch_transfer(self, batch, dataloader_idx):
            return batch
    _DataHookSelector(Module(), Data()).get_instance("on_before_batch_transfer")


@trigger("you-have-overridden-in-lightningmodule-but-have-passed-i-1240b9")
def lightning_batch_transfer_hook_in_module_with_a_datamodule():
    import pytorch_lightning as pl
    from pytorch_lightning.trainer.connectors.data_connector import _DataHookSelector

    class Module(_module_class()):
        def on_after_batch_transfer(self, batch, dataloader_idx):
            return batch
    _DataHookSelector(Module(), pl.LightningDataModule()).get_instance("on_after_batch_transfer")


@trigger("you-are-trying-to-self-log-but-the-loop-c58dd9")
def lightning_log_in_predict_step():
    class Logs(_module_class()):
        def predict_step(self, batch, batch_idx):
            self.log("value", 1.0)
    _trainer().predict(Logs(), dataloaders=_data())


@trigger("the-closure-hasn-t-been-executed-hint-did-you-dcf788")
def lightning_optimizer_step_without_the_closure():
    class NoClosure(_module_class()):
        def optimizer_step(self, epoch, batch_idx, optimizer, optimizer_closure=None):
            optimizer.step()
    _fit(NoClosure())


@trigger("you-provided-only-a-single-dataloader-but-have-included-9e6fa8")
def lightning_dataloader_idx_with_one_dataloader():
    class WithIndex(_module_class()):
        def validation_step(self, batch, batch_idx, dataloader_idx):
            pass
    _trainer().validate(WithIndex(), dataloaders=_data())


@trigger("you-provided-multiple-dataloader-but-no-dataloader-idx-a-0672c0")
def lightning_two_dataloaders_without_dataloader_idx():
    class NoIndex(_module_class()):
        def validation_step(self, batch, batch_idx):
            pass
    _trainer().validate(NoIndex(), dataloaders=[_data(), _data()])


class _NotAScheduler:
    def __init__(self, optimizer):
        self.optimizer = optimizer

    def state_dict(self):
        return {}

    def load_state_dict(self, state):
        pass


@trigger("the-provided-lr-scheduler-doesn-t-follow-pytorch-s-a98478")
def lightning_custom_scheduler_without_lr_scheduler_step():
    class Custom(_module_class()):
        def configure_optimizers(self):
            optimizer = torch.optim.SGD(self.parameters(), lr=0.1)
            return {"optimizer": optimizer, "lr_scheduler": _NotAScheduler(optimizer)}
    _fit(Custom())


@trigger("when-using-trainer-accumulate-grad-batches-1-and-overrid-062bd4")
def lightning_accumulation_scheduler_with_optimizer_step_overridden():
    from pytorch_lightning.callbacks import GradientAccumulationScheduler

    class Steps(_module_class()):
        def optimizer_step(self, *args, **kwargs):
            super().optimizer_step(*args, **kwargs)
    _fit(Steps(), callbacks=[GradientAccumulationScheduler({0: 2})])


@trigger("you-are-using-the-dataloader-iter-step-flavor-if-7dd13a")
def lightning_training_step_taking_the_dataloader_iterator():
    class Iterates(_module_class()):
        def training_step(self, dataloader_iter):
            x, y = next(dataloader_iter)[0]
            return nn.functional.mse_loss(self.layer(x), y)
    _fit(Iterates())


# --- Fabric -------------------------------------------------------------------------------------------------

@trigger("the-current-strategy-and-precision-selection-requires-yo-95f9a9")
def fabric_loss_backward_under_mixed_precision():
    from lightning_fabric import Fabric
    fabric = Fabric(accelerator="cpu", devices=1, precision="bf16-mixed")
    model = fabric.setup_module(nn.Linear(4, 1))
    model(torch.ones(1, 4)).sum().backward()


class _NotCallable:
    on_train_start = 3


@trigger("skipping-the-callback-because-it-is-not-callable-33a800")
def fabric_callback_attribute_that_is_not_a_method():
    from lightning_fabric import Fabric
    Fabric(accelerator="cpu", devices=1, callbacks=[_NotCallable()]).call("on_train_start")


# --- the sampler Lightning injects under a DDP strategy: one CPU process is enough -------------------------

def _fit_under_ddp(loader):
    import torch.distributed as dist
    try:
        _trainer(strategy="ddp").fit(_module_class()(), train_dataloaders=loader)
    finally:
        if dist.is_initialized():  # the strategy's one-process group
            dist.destroy_process_group()


class _Batches(torch.utils.data.BatchSampler):
    """A BatchSampler whose arguments come in another order: Lightning cannot make it again with its sampler."""

    def __init__(self, batch_size, sampler, drop_last=False):
        super().__init__(sampler, batch_size, drop_last)


@trigger("lightning-can-t-inject-a-distributed-sampler-into-your-7c38f0")
def lightning_ddp_with_a_batch_sampler_of_another_signature():
    data = _data().dataset
    _fit_under_ddp(DataLoader(data, batch_sampler=_Batches(2, torch.utils.data.SequentialSampler(data))))


class _ScaledLoader(DataLoader):
    def __init__(self, data, scale, **options):  # neither argument is kept as an attribute
        super().__init__(data, **options)


@trigger("trying-to-inject-custom-sampler-into-the-instance-this-7a00ba")
def lightning_ddp_with_a_dataloader_subclass_that_drops_its_arguments():
    _fit_under_ddp(_ScaledLoader(_data().dataset, 2.0, batch_size=2))


@trigger("when-using-the-you-are-required-to-override-the-b63670")
def lightning_model_parallel_strategy_without_configure_model():
    import torch.distributed as dist
    from pytorch_lightning.strategies import ModelParallelStrategy
    try:
        _fit(_module_class()(), strategy=ModelParallelStrategy())
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


test_trigger = triggers_of(__name__)
