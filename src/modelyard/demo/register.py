"""Register the demo model and its ``demo`` deployment, once, at the server's first start."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import select

from modelyard.demo.prepare import DEMO_DEPLOYMENT_NAME, DEMO_MODEL_NAME
from modelyard.hardware.gpus import GpuInventory
from modelyard.services.deployment_request import DeploymentRequest
from modelyard.services.deployments import create_deployment
from modelyard.services.model_files import register_model
from modelyard.store.database import Database
from modelyard.store.tables import ModelFile


def register_demo(database: Database, model_directory: Path, inventory: GpuInventory) -> bool:
    """Add the demo model and deployment unless the model is already registered.

    Returns True when they were added. A user who removed the ``demo`` deployment keeps it
    removed: the deployment is only created together with the model record.
    """
    with database.session() as session:
        if session.scalar(select(ModelFile).where(ModelFile.name == DEMO_MODEL_NAME)) is not None:
            return False
        register_model(session, DEMO_MODEL_NAME, model_directory)
        create_deployment(
            session,
            DeploymentRequest(
                model=DEMO_MODEL_NAME,
                name=DEMO_DEPLOYMENT_NAME,
                backend="transformers",
                gpus_per_replica=0,
            ),
            inventory,
        )
        return True
